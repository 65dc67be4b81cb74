"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real backend training the
tiny Qwen3: the page loads after a one-time login, the job's charts fill in while it trains without a reload,
the event log and the result appear, the "try it" chat answers, files/models/eval runs list, and a transcript
shows its picture and shows hostile markup as text. A long finished RL job shows its newest events first and pages
back to its first, its checkpoints' iterations with the pruned ones in one line, and only the charts an RL job has.
No console errors (a CSP violation is one). Screenshots go to test-artifacts/dashboard/ (or
$SYNTH_TEST_ARTIFACTS/dashboard/)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from backend_support import BackendProcess, chat_jsonl, job_status, link_tiny, sft_body, upload, wait_for
from dashboard_support import HOSTILE, artifacts_dir, chromium_path, store_of, write_eval_traces, write_long_rl_job

pytestmark = pytest.mark.slow
WAIT_S = 120
WAIT_MS = WAIT_S * 1000
# (page.wait_for_function would evaluate a string in the page, which the dashboard's CSP refuses: polled here)


def _points(page, title: str) -> int:
    return int(page.get_attribute(f'[data-chart="{title}"]', "data-points") or 0)


def _charts(page) -> list[str]:
    return [c.get_attribute("data-chart") for c in page.locator("[data-chart]").all()]


def _seqs(page) -> list[int]:
    return [int(t) for t in page.locator("#events tbody tr td:first-child").all_inner_texts()]


@contextmanager
def logged_in_page(backend: BackendProcess, browser_path: str) -> Iterator[Any]:
    """A Chromium page logged in with a one-time link; any console error (a CSP violation is one) fails the test."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with backend.client() as api:
        login = api.post("/dashboard/login-token", json={}).json()["url"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(login)
        page.wait_for_selector('[data-nav="jobs"].active', timeout=WAIT_MS)
        yield page
        browser.close()
    assert not problems, problems


def test_dashboard_in_chromium(tmp_path, tiny_models):
    browser_path = chromium_path()
    shots = artifacts_dir()
    traces = write_eval_traces(tmp_path / "evals.db")
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_TRACES": str(traces)}).start()
    try:
        with backend.client() as api, logged_in_page(backend, browser_path) as page:
            train = upload(api, chat_jsonl(tmp_path / "train.jsonl", n=16)).json()
            job = api.post("/learning/jobs", json=sft_body(train["id"], steps=20, logging_steps=1)).json()
            page.goto(f"{backend.url}/#/jobs")
            page.wait_for_selector("#jobs", timeout=WAIT_MS)
            assert job["id"] in page.inner_text("#jobs")

            # open the job page before it starts, then start it: everything after comes from polling
            page.goto(f"{backend.url}/#/jobs/{job['id']}")
            page.wait_for_selector('#job-facts[data-status="created"]', timeout=WAIT_MS)
            assert _points(page, "Loss") == 0
            assert api.post(f"/learning/jobs/{job['id']}/start", json={}).status_code == 200
            # meanwhile someone asks the base model (which also loads the inference engine while the job trains)
            pool = ThreadPoolExecutor(1)
            base_answer = pool.submit(api.post, "/inference/v1/chat/completions", json={
                "model": job["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
            pool.shutdown(wait=False)
            wait_for(lambda: _points(page, "Loss") > 0, timeout=WAIT_S, interval=0.2, what="loss points")
            page.screenshot(path=str(shots / "job-training.png"), full_page=True)
            assert job_status(api, job["id"]) != "created"
            page.wait_for_selector('#job-facts[data-status="succeeded"]', timeout=WAIT_MS)
            wait_for(lambda: _points(page, "Loss") >= 20, timeout=WAIT_S, interval=0.2, what="all loss points")
            assert _points(page, "Learning rate") >= 20
            assert _charts(page) == ["Loss", "Learning rate"]  # an SFT job has no reward: no empty RL charts
            assert "sft.job.completed" in page.inner_text("#events")
            # event messages are user-influenced: one with markup, written as a worker writes events
            with store_of(backend.data_dir) as store:
                store.add_event(job["id"], "sft.note", HOSTILE, {}, "warning")

            assert base_answer.result(timeout=WAIT_S).status_code == 200
            # the chat box answers with the fine-tuned model
            model = api.get(f"/learning/jobs/{job['id']}").json()["fine_tuned_model"]
            page.wait_for_selector("#chat-input", timeout=WAIT_MS)
            assert page.inner_text("#chat-model") == model
            page.fill("#chat-input", "What is 2 plus 2?")
            page.click("#chat-send")
            page.wait_for_selector("#chat-log .msg.assistant", timeout=WAIT_MS)
            assert page.inner_text("#chat-log .msg.user").endswith("What is 2 plus 2?")
            page.screenshot(path=str(shots / "job-done-chat.png"), full_page=True)
            page.reload()  # a fresh page reads the whole log, the event written after the end included
            page.wait_for_selector("#events tr.level-warning", timeout=WAIT_MS)
            assert HOSTILE in page.inner_text("#events tr.level-warning")
            assert page.locator("#pwned").count() == 0 and page.title() != "pwned"

            page.goto(f"{backend.url}/#/files")
            page.wait_for_selector("#files", timeout=WAIT_MS)
            assert "train.jsonl" in page.inner_text("#files")
            page.goto(f"{backend.url}/#/models")
            page.wait_for_selector("#models", timeout=WAIT_MS)
            assert model in page.inner_text("#models")
            # the model's page shows the command that exports it
            page.click(f'#models a:text-is("{model}")')
            page.wait_for_selector("#export-command", timeout=WAIT_MS)
            assert page.inner_text("#export-command") == (
                f"synth-ai models export {model} --out ./{model.replace(':', '-').replace('/', '-')}")

            # eval runs from the trace database: per-seed scores, then a transcript with its picture
            page.goto(f"{backend.url}/#/evals")
            page.wait_for_selector("#runs", timeout=WAIT_MS)
            page.click("#runs a")
            page.wait_for_selector("#seeds", timeout=WAIT_MS)
            rows = page.locator("#seeds tbody tr")
            assert rows.count() == 3
            assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)] == ["1", "0", "0.5"]
            page.screenshot(path=str(shots / "eval-run.png"), full_page=True)
            rows.nth(2).locator("a").click()
            page.wait_for_selector("#transcript img", timeout=WAIT_MS)
            assert page.eval_on_selector("#transcript img", "img => img.complete && img.naturalWidth") == 24
            assert HOSTILE in page.inner_text("#transcript .msg.assistant")  # shown as text, not run
            assert page.locator("#pwned").count() == 0 and page.title() != "pwned"
            page.screenshot(path=str(shots / "eval-transcript.png"), full_page=True)
    finally:
        backend.stop()


def test_long_rl_job_in_chromium(tmp_path):
    """A finished RL job of 300 iterations (under /api/rl/jobs), its rows written as its worker would: only the
    charts an RL job has; the log opens on its newest events (the completion on top) and pages back to the first;
    checkpoints show their iteration, the pruned ones in one line."""
    browser_path = chromium_path()
    backend = BackendProcess(tmp_path / "data", env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"}).start()
    try:
        with store_of(backend.data_dir) as store:
            rl = write_long_rl_job(store, "synth-ai/tiny-qwen3", tmp_path / "rl-work")
        with logged_in_page(backend, browser_path) as page:
            page.goto(f"{backend.url}/#/jobs/{rl.job_id}")
            page.wait_for_selector('#job-facts[data-status="succeeded"]', timeout=WAIT_MS)
            wait_for(lambda: _points(page, "RL reward") == 300, timeout=WAIT_S, interval=0.2, what="reward points")
            assert _charts(page) == ["Loss", "RL reward", "Eval return"]
            assert _points(page, "Loss") == 300 and _points(page, "Eval return") == 30
            assert "iteration 299" in page.text_content('[data-chart="RL reward"]')

            wait_for(lambda: _seqs(page), timeout=WAIT_S, interval=0.2, what="events")
            assert _seqs(page) == list(range(rl.events, rl.events - 100, -1))
            assert "Job completed" in page.inner_text("#events tbody tr:first-child")
            page.screenshot(path=str(artifacts_dir() / "rl-job.png"), full_page=True)
            while page.is_visible("#events-earlier"):
                shown = len(_seqs(page))
                page.click("#events-earlier")
                wait_for(lambda shown=shown: len(_seqs(page)) > shown, timeout=WAIT_S, interval=0.2,
                         what="earlier events")
            assert _seqs(page) == list(range(rl.events, 0, -1))
            assert "RL job created" in page.inner_text("#events tbody tr:last-child")

            page.wait_for_selector("#checkpoints-kept", timeout=WAIT_MS)
            assert page.inner_text("#checkpoints-kept thead th:first-child").lower() == "iteration"
            kept = page.locator("#checkpoints-kept tbody tr td:first-child").all_inner_texts()
            assert kept == [str(i) for i in rl.kept]
            assert page.inner_text("#checkpoints-pruned") == \
                f"{len(rl.pruned)} checkpoints pruned from disk (iterations {rl.pruned[0]}–{rl.pruned[-1]})"
            assert "null" not in page.inner_text("#checkpoints")
    finally:
        backend.stop()
