"""Handing the backend a task app's ENVIRONMENT_API_KEY, sealed: the embedded backend's `/api/v1/crypto/public-key`,
`/api/v1/env-keys` and `/api/v1/env-keys/verify` against a real `synth-ai backend serve` process, driven by a real
PyNaCl client, by our `serve` preflight, and by synth-ai 0.2.17's own upload helper (reference venv)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess

import pytest
from backend_support import BackendProcess, serve_backend
from conftest import REPO_ROOT, free_port
from reference_support import REF_PYTHON
from taskapp_support import stop, subprocess_env, synth_ai_command, wait_for_health

SECRET = "sk_env_sealed_upload_0123456789abcdef"


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "env-keys")


@pytest.fixture
def api(backend):
    with backend.client() as client:
        yield client


def _seal(public_b64: str, secret: str) -> str:
    from nacl.public import PublicKey, SealedBox

    return base64.b64encode(SealedBox(PublicKey(base64.b64decode(public_b64))).encrypt(secret.encode())).decode()


def _stored(backend: BackendProcess) -> list[dict]:
    return json.loads((backend.data_dir / "env_keys.json").read_text())["keys"]


def test_sealed_round_trip_stores_the_key_privately_and_never_echoes_it(api, backend):
    doc = api.get("/v1/crypto/public-key").json()
    assert doc["alg"] == "libsodium.sealedbox.v1"
    assert len(base64.b64decode(doc["public_key"], validate=True)) == 32
    assert api.get("/v1/crypto/public-key").json()["public_key"] == doc["public_key"]  # one key pair, kept

    assert api.get("/v1/env-keys/verify").json()["present"] is False
    response = api.post("/v1/env-keys", json={"name": "ENVIRONMENT_API_KEY",
                                              "ciphertext_b64": _seal(doc["public_key"], SECRET)})
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "ENVIRONMENT_API_KEY" and response.json()["stored"] is True
    verified = api.get("/v1/env-keys/verify").json()
    assert verified["present"] is True and verified["uploaded"] is True

    from synth_ai.env.backend_keys import environment_keys, known_environment_keys

    assert environment_keys(backend.data_dir, environ={}) == [SECRET]  # what the worker and the probes try
    assert "uploaded" in known_environment_keys(backend.data_dir, environ={})[0].origin
    for name in ("env_keys.json", "env_key_box.json"):
        assert stat.S_IMODE((backend.data_dir / name).stat().st_mode) == 0o600, name
    private = json.loads((backend.data_dir / "env_key_box.json").read_text())
    assert private["public_key_b64"] == doc["public_key"]
    for text in (response.text, json.dumps(verified), backend.log()):
        assert SECRET not in text and SECRET[:12] not in text
    assert private["private_key_b64"] not in backend.log()


def test_bad_uploads_say_what_is_wrong(api):
    from nacl.public import PrivateKey

    other = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()
    public = api.get("/v1/crypto/public-key").json()["public_key"]
    cases = [
        ({"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": _seal(other, SECRET)}, 400, "undecryptable"),
        ({"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": "not base64!"}, 400, "invalid_request"),
        ({"name": "OPENAI_API_KEY", "ciphertext_b64": _seal(public, SECRET)}, 400, "invalid_request"),
        ({"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": _seal(public, "two\nlines")}, 400, "invalid_key"),
        ({"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": "A" * 20000}, 413, "payload_too_large"),
        ([1, 2], 400, "invalid_request"),
    ]
    for body, status, code in cases:
        response = api.post("/v1/env-keys", json=body)
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"]["code"] == code
    assert "another public key" in api.post("/v1/env-keys", json=cases[0][0]).json()["detail"]


def test_uploads_keep_the_newest_first_and_at_most_eight(tmp_path):
    from synth_ai.env.backend_keys import UPLOADED, environment_keys, register_environment_key

    register_environment_key("setup-key-000000000", data_dir=tmp_path)
    for i in range(10):
        register_environment_key(f"upload-key-{i:010d}", source=UPLOADED, data_dir=tmp_path)
    register_environment_key("upload-key-0000000005", source=UPLOADED, data_dir=tmp_path)  # again: moves first
    keys = environment_keys(tmp_path, environ={"ENVIRONMENT_API_KEY": "env-key-0000000000"})
    assert keys[0] == "env-key-0000000000"
    assert keys[1] == "upload-key-0000000005"
    assert keys[2:9] == [f"upload-key-{i:010d}" for i in (9, 8, 7, 6, 4, 3, 2)]
    assert keys[-1] == "setup-key-000000000" and len(keys) == 10


@pytest.mark.reference_venv
def test_reference_client_uploads_to_our_backend(api, backend):
    """synth-ai 0.2.17's `setup_environment_api_key` (what its serve/deploy preflight runs) against our backend."""
    key = "sk_env_from_reference_client_42424242"
    code = ("import json, sys; from synth_ai.learning.rl.env_keys import setup_environment_api_key as up; "
            "print(json.dumps(up(sys.argv[1], sys.argv[2], token=sys.argv[3])))")
    done = subprocess.run([str(REF_PYTHON), "-c", code, backend.url, backend.key, key], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["stored"] is True
    assert key in [e["key"] for e in _stored(backend)]
    assert api.get("/v1/env-keys/verify").json()["present"] is True


def test_serve_shares_its_key_with_the_running_embedded_backend(tmp_path):
    """`synth-ai serve` finds the embedded backend of its data dir and uploads the app's key, sealed."""
    data_dir = tmp_path / "home"
    backend = BackendProcess(data_dir).start()
    port = free_port()
    key = "sk_env_served_app_key_77777777"
    env = subprocess_env(SYNTH_AI_HOME=str(data_dir), ENVIRONMENT_API_KEY=key)
    process = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--port", str(port)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
    try:
        wait_for_health(f"http://127.0.0.1:{port}", key, process=process)
    finally:
        output = stop(process)
        backend.stop()
    assert "ENVIRONMENT_API_KEY uploaded and verified" in output, output
    assert key not in output
    assert [e["key"] for e in _stored(backend) if e.get("source") == "upload"] == [key]


def test_serve_without_a_backend_skips_the_upload(tmp_path):
    port = free_port()
    key = "sk_env_lonely_app_key_88888888"
    env = subprocess_env(SYNTH_AI_HOME=str(tmp_path / "home"), ENVIRONMENT_API_KEY=key)
    process = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--port", str(port)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
    try:
        wait_for_health(f"http://127.0.0.1:{port}", key, process=process)
    finally:
        output = stop(process)
    assert "no embedded backend runs on this machine" in output, output
    assert not (tmp_path / "home" / "env_keys.json").exists()


def test_sealing_helper_checks_the_public_key():
    from synth_ai.client.env_keys import seal
    from synth_ai.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="32"):
        seal(base64.b64encode(b"short").decode(), SECRET)
    with pytest.raises(InvalidInputError, match="base64"):
        seal("%%%", SECRET)


def test_our_client_shows_the_backends_reason_and_fix(backend):
    """An upload sealed to another key: the client's error carries the backend's message and hint (exit 3)."""
    from nacl.public import PrivateKey

    from synth_ai.client.env_keys import EnvKeys
    from synth_ai.client.transport import Transport
    from synth_ai.errors import InvalidInputError

    stale = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()
    with Transport(f"{backend.url}/api", backend.key) as transport:
        routes = EnvKeys(transport)
        routes.public_key = lambda: stale  # a public key from before the backend's key pair was replaced
        with pytest.raises(InvalidInputError) as caught:
            routes.upload(SECRET)
    assert "another public key" in caught.value.message
    assert "GET /api/v1/crypto/public-key" in (caught.value.hint or "")
    assert caught.value.details["detail"]["code"] == "undecryptable" and caught.value.exit_code == 3


@pytest.mark.reference_venv
def test_reference_serve_preflight_uploads_and_verifies(backend, tmp_path):
    """synth-ai 0.2.17's `preflight_env_key` (run by its serve/deploy) ends with its 'Key verified in backend'."""
    key = "sk_env_reference_preflight_31313131"
    code = "from synth_ai.cli.lib.task_app_env import preflight_env_key as p; p(crash_on_failure=True)"
    env = {**os.environ, "BACKEND_BASE_URL": backend.url, "SYNTH_API_KEY": backend.key, "ENVIRONMENT_API_KEY": key,
           "HOME": str(tmp_path)}
    done = subprocess.run([str(REF_PYTHON), "-c", code], capture_output=True, text=True, timeout=180, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ENVIRONMENT_API_KEY uploaded successfully" in done.stdout
    assert "Key verified in backend" in done.stdout
    assert key in [e["key"] for e in _stored(backend)]
