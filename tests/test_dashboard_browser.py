"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real backend training the
tiny Qwen3: the page loads after a one-time login, the job's charts fill in while it trains without a reload,
the event log and the result appear, the "try it" chat answers, files/models/eval runs list, and a transcript
shows its picture and shows hostile markup as text. No console errors (a CSP violation is one). Screenshots go
to test-artifacts/dashboard/ (or $SYNTH_TEST_ARTIFACTS/dashboard/)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from synth_ai.backend.store.db import Database
from synth_ai.backend.store.job_records import JobStore

from backend_support import (BackendProcess, chat_jsonl, job_status, link_tiny, sft_body, upload,
                             wait_for)
from dashboard_support import HOSTILE, artifacts_dir, chromium_path, write_eval_traces

pytestmark = pytest.mark.slow
WAIT_S = 120
WAIT_MS = WAIT_S * 1000
# (page.wait_for_function would evaluate a string in the page, which the dashboard's CSP refuses: polled here)


@contextmanager
def store_of(backend: BackendProcess):
    """The backend's job store, opened from the test as a worker process opens it."""
    store = JobStore(Database(backend.data_dir / "backend" / "backend.sqlite3"))
    try:
        yield store
    finally:
        store.db.close()


def _points(page, title: str) -> int:
    return int(page.get_attribute(f'[data-chart="{title}"]', "data-points") or 0)


def test_dashboard_in_chromium(tmp_path, tiny_models):
    browser_path = chromium_path()
    from playwright.sync_api import sync_playwright

    shots = artifacts_dir()
    traces = write_eval_traces(tmp_path / "evals.db")
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_TRACES": str(traces)}).start()
    problems: list[str] = []
    try:
        with backend.client() as api, sync_playwright() as pw:
            train = upload(api, chat_jsonl(tmp_path / "train.jsonl", n=16)).json()
            job = api.post("/learning/jobs", json=sft_body(train["id"], steps=20, logging_steps=1)).json()
            login = api.post("/dashboard/login-token", json={}).json()["url"]

            browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(login)
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
            assert _points(page, "RL reward") == 0  # an SFT job has no reward
            assert "sft.job.completed" in page.inner_text("#events")
            # event messages are user-influenced: one with markup, written as a worker writes events
            with store_of(backend) as store:
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

            # an RL job's page (under /api/rl/jobs) charts reward and eval return; its rows written as its worker would
            with store_of(backend) as store:
                with store.db.tx() as conn:
                    rl_id = store.insert(conn, kind="rl", training_type="rl_online", model=job["model"], payload={},
                                         files=[])
                store.add_metrics(rl_id, [("reward.mean", 0, 0.2, "train"), ("reward.mean", 1, 0.5, "train"),
                                          ("loss", 0, 0.1, "train"), ("eval.mean_return", 1, 0.4, "eval")])
            page.goto(f"{backend.url}/#/jobs/{rl_id}")
            wait_for(lambda: _points(page, "RL reward") == 2, timeout=WAIT_S, interval=0.2, what="RL reward points")
            assert _points(page, "Eval return") == 1 and _points(page, "Learning rate") == 0

            page.goto(f"{backend.url}/#/files")
            page.wait_for_selector("#files", timeout=WAIT_MS)
            assert "train.jsonl" in page.inner_text("#files")
            page.goto(f"{backend.url}/#/models")
            page.wait_for_selector("#models", timeout=WAIT_MS)
            assert model in page.inner_text("#models")

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
            browser.close()
    finally:
        backend.stop()
    assert not problems, problems
