"""RL from the client's side, end to end on this machine: a real backend (`synth-ai backend serve`) running GSPO on
the tiny local Qwen3, the bundled color-quiz task app served by `synth-ai serve` (whose preflight hands its key to
that backend, sealed), followed by our `synth-ai train --type rl` and by synth-ai 0.2.17's own CLI. Also the
create-time refusals over HTTP, now that the backend runs RL.

0.2.17 only accepts model ids from its allow-list, so for its run the tiny model is also linked into the model
store's local folder as `Qwen/Qwen3-0.6B`, the way a user supplies a real checkpoint offline."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from backend_support import TINY_TEXT, BackendProcess, build_tiny_models, link_tiny, wait_for
from conftest import REPO_ROOT, free_port, run_cli
from reference_support import REF_CLI
from taskapp_support import running_app, stop, subprocess_env, synth_ai_command, wait_for_health

pytestmark = pytest.mark.slow

TINY_CONFIG = REPO_ROOT / "examples" / "configs" / "rl_tiny_local.toml"
APP_KEY = "sk_env_color_quiz_e2e_0123456789"
STAND_IN = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("rl-e2e") / "home"
    data_dir.mkdir()
    built = build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,))
    link_tiny(data_dir, built)
    local = data_dir / "models" / "local" / STAND_IN
    local.parent.mkdir(parents=True, exist_ok=True)
    local.symlink_to(built[0], target_is_directory=True)
    # No ENVIRONMENT_API_KEY in the backend's environment: it learns the app's key only from the serve preflight.
    process = BackendProcess(data_dir).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def color_app(backend):
    """`synth-ai serve color-quiz`, started after the backend so its preflight finds it and uploads its key."""
    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", "color-quiz", "--port", str(port)],
                               env=subprocess_env(isolated=True, SYNTH_AI_HOME=str(backend.data_dir),
                                                  ENVIRONMENT_API_KEY=APP_KEY),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, APP_KEY, process=process)
        yield url
    finally:
        output = stop(process)
        assert APP_KEY not in output


def small_config(path: Path, *, model: str | None = None, iterations: int = 2) -> Path:
    """The shipped tiny config, shortened (fewer iterations, evaluation on 2 seeds)."""
    text = TINY_CONFIG.read_text()
    text = text.replace("iterations_per_epoch = 16", f"iterations_per_epoch = {iterations}")
    text = text.replace("every_n_iters = 8", "every_n_iters = 1").replace("instances = 8", "instances = 2")
    text = text.replace('seeds = "0-7"', "seeds = [0, 1]").replace("batch_size = 4", "batch_size = 2")
    text = text.replace("group_size = 8", "group_size = 4")
    if model:
        text = text.replace('base = "synth-ai/tiny-qwen3"', f'base = "{model}"')
    path.write_text(text)
    return path


def test_serve_preflight_gave_the_backend_the_key(backend, color_app):
    from synth_ai.env.backend_keys import known_environment_keys

    known = known_environment_keys(backend.data_dir, environ={})
    assert [k.value for k in known] == [APP_KEY] and "uploaded" in known[0].origin


def test_our_client_trains_rl_to_succeeded(backend, color_app, tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", APP_KEY)
    result = run_cli("train", "--type", "rl", "--config", str(small_config(tmp_path / "rl.toml")), "--task-url",
                     color_app, "--backend", backend.url, "--poll-interval", "0.5")
    out = result.stdout
    assert result.exit_code == 0, out + result.stderr
    for line in ("Task app healthy", "Verification OK", "✓ Job created", "rl.train.started",
                 "rl.train.step (info): iteration 1/2", "rl.train.step (info): iteration 2/2", "reward.mean=",
                 "(step=0)", "eval.mean_return=", "rl.eval.summary", "Final status: succeeded"):
        assert line in out, line
    model = out.split("fine_tuned_model: ", 1)[1].split()[0]
    assert model.startswith("rl:")
    assert out.index("reward.mean = ") < out.index("Final status: succeeded")
    assert APP_KEY not in out + result.stderr and backend.key not in out + result.stderr
    # the model is usable: listed by the backend, and training continues from it with --model ([model].source)
    with backend.client() as client:
        ids = {m["id"] for m in client.get("/learning/models").json()["data"]}
    assert model in ids
    again = run_cli("--json", "train", "--type", "rl", "--config", str(small_config(tmp_path / "rl2.toml",
                    iterations=1)), "--task-url", color_app, "--backend", backend.url, "--model", model,
                    "--poll-interval", "0.5")
    assert again.exit_code == 0, again.stdout + again.stderr
    doc = again.json()
    assert doc["status"] == "succeeded" and doc["job"]["model"] == model
    assert doc["fine_tuned_model"].startswith("rl:") and doc["fine_tuned_model"] != model
    assert "reward.mean" in doc["last_metrics"]


@pytest.mark.reference_venv
def test_reference_client_trains_rl_to_succeeded(backend, color_app, tmp_path):
    work = tmp_path / "ref-work"
    work.mkdir()
    config = small_config(tmp_path / "rl.toml", model=STAND_IN)
    env_file = tmp_path / "ref.env"
    env_file.write_text(f"SYNTH_API_KEY={backend.key}\nENVIRONMENT_API_KEY={APP_KEY}\nTASK_APP_URL={color_app}\n")
    env = {k: v for k, v in subprocess_env().items() if k not in {"SYNTH_API_KEY", "ENVIRONMENT_API_KEY",
                                                                  "SYNTH_AI_HOME", "TASK_APP_URL"}}
    env["HOME"] = str(tmp_path / "refhome")
    done = subprocess.run([str(REF_CLI), "train", "--type", "rl", "--config", str(config), "--env-file",
                           str(env_file), "--backend", backend.url, "--poll-interval", "1"],
                          env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    for line in ("Verification OK", "Task app healthy", "Response 201", "Final status: succeeded"):
        assert line in out, f"{line!r} is missing from the reference client's output:\n{out[-6000:]}"
    job_id = out.split('"job_id": "', 1)[1].split('"', 1)[0]
    model = f"rl:{STAND_IN}:{job_id}"
    # the payload 0.2.17 prints last is its last status read: when the timeline saw the end first, that read was
    # still `running`, without the model (the race described below)
    shown_model = out.rsplit('"fine_tuned_model": ', 1)[1].split(",", 1)[0].strip()
    assert shown_model in (f'"{model}"', "null"), out[-3000:]
    with backend.client() as client:
        assert client.get(f"/rl/jobs/{job_id}").json()["fine_tuned_model"] == model
        stored = client.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]
        points = client.get(f"/rl/jobs/{job_id}/metrics").json()["points"]
    types = [e["type"] for e in stored]
    assert types.count("rl.train.step") == 2 and "rl.train.completed" in types, types
    # 0.2.17 reads the timeline after the events: a job that ends between the two reads stops its stream before the
    # last events. What it printed must still be the backend's events, in order, from the first, in its own format.
    printed = [line.split("] ", 1)[1] for line in out.splitlines() if re.match(r"\[\d\d:\d\d:\d\d\] \[\d+\] ", line)]
    hidden = ("modal", "hatchet")  # 0.2.17's RL stream hides events that mention these
    expected = [f"[{e['seq']}] {e['type']} ({e['level']}): {e['message']}".rstrip(": ") for e in stored
                if not any(word in f"{e['type']} {e['message']} {json.dumps(e.get('data', ''))}".lower()
                           for word in hidden)]
    assert printed and printed == expected[:len(printed)], (printed, expected)
    shown_metrics = re.findall(r"^\[\d\d:\d\d:\d\d\] ([\w.]+)=(\S+) \(step=(\d+)\)$", out, re.M)
    stored_metrics = {(p["name"], float(p["value"]), int(p["step"])) for p in points}
    assert {(name, float(value), int(step)) for name, value, step in shown_metrics} <= stored_metrics


def _rl_body(url: str, **data) -> dict:
    config = json.loads(json.dumps({"algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
                                    "model": {"base": TINY_TEXT, "trainer_mode": "full", "label": "t"}}))
    return {"job_type": "rl", "compute": {"gpu_type": "H100", "gpu_count": 1},
            "data": {"endpoint_base_url": url, "base_model": TINY_TEXT, "config": config, **data}}


def test_create_refuses_what_the_worker_could_not_use(backend, color_app, monkeypatch):
    """Over HTTP, and through our client's typed errors: an app with another key, and a dead URL. (`color_app`: its
    serve preflight is how the backend knows the key the refusal names.)"""
    from synth_ai.client.resources import SynthAPI
    from synth_ai.client.transport import Transport
    from synth_ai.errors import AuthError, NetworkError
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.discovery import load_task_app

    other_key = "sk_env_someone_elses_app_99999999"
    monkeypatch.setenv("ENVIRONMENT_API_KEY", other_key)
    with running_app(create_task_app(load_task_app("color-quiz").config_factory())) as other_app, \
            backend.client() as client:
        response = client.post("/rl/jobs", json=_rl_body(other_app))
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "task_app_auth_failed"
        assert "sk_e…89 (uploaded sealed" in error["message"] and "synth-ai setup --local" in error["message"]
        assert other_key not in response.text and APP_KEY not in response.text
        with Transport(f"{backend.url}/api", backend.key) as transport, pytest.raises(AuthError) as caught:
            SynthAPI(transport).rl.create(_rl_body(other_app), idempotency_key="refused-1")
        assert caught.value.exit_code == 4 and "synth-ai serve" in (caught.value.hint or "")

        # the key sent with the job joins the known keys and is not stored in the job
        created = client.post("/rl/jobs", json=_rl_body(other_app, environment_api_key=other_key))
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert other_key not in client.get(f"/rl/jobs/{job_id}/config").text
        client.post(f"/rl/jobs/{job_id}/cancel")
        wait_for(lambda: client.get(f"/rl/jobs/{job_id}").json()["status"] in ("cancelled", "failed", "succeeded"),
                 timeout=120, what="the job to stop")

    dead = f"http://127.0.0.1:{free_port()}"
    with backend.client() as client:
        response = client.post("/rl/jobs", json=_rl_body(dead))
    assert response.status_code == 400 and response.json()["error"]["code"] == "task_app_unreachable"
    with Transport(f"{backend.url}/api", backend.key) as transport, pytest.raises(NetworkError) as caught:
        SynthAPI(transport).rl.create(_rl_body(dead), idempotency_key="refused-2")
    assert caught.value.exit_code == 5
    assert httpx.get(f"{backend.url}/health").status_code == 200
