"""The create-time probe of `POST /api/rl/jobs` (`synth_ai.backend.api.taskapp_probe`): a job whose task app the RL worker
could not call is refused at once with the keys tried (masked) and the fix. Against the real bundled math task app
served over HTTP, with the keys in a real backend data dir."""

from __future__ import annotations

import httpx
import pytest
from conftest import free_port
from taskapp_support import ENV_KEY, math_entry, running_app

from synth_ai.env.backend_keys import UPLOADED, known_environment_keys, register_environment_key
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.api.taskapp_probe import require_usable_task_app

WRONG = "sk_env_stale_key_from_last_week_0000"


@pytest.fixture
def math_app(monkeypatch):
    """The app reads its key per request, so it is set per test (the autouse fixture clears the environment)."""
    from synth_ai.taskapp import create_task_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_app(create_task_app(math_entry().config_factory())) as base:
        yield base


def _refusal(base: str, data_dir, environ=None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        require_usable_task_app(base, known_environment_keys(data_dir, environ=environ or {}))
    return caught.value


def test_no_key_known_is_refused_with_the_fix(math_app, tmp_path):
    err = _refusal(math_app, tmp_path)
    assert (err.status_code, err.code) == (400, "missing_environment_api_key")
    assert "knows no ENVIRONMENT_API_KEY" in err.message
    assert "synth-ai setup --local" in err.hint and "synth-ai serve" in err.hint and "--env-file" in err.hint


def test_wrong_keys_are_named_masked_with_where_they_came_from(math_app, tmp_path):
    register_environment_key(WRONG, source=UPLOADED, data_dir=tmp_path)
    err = _refusal(math_app, tmp_path, {"ENVIRONMENT_API_KEY": "sk_env_backend_env_key_1111"})
    assert (err.status_code, err.code) == (400, "task_app_auth_failed")
    assert "sk_e…11 (backend env ENVIRONMENT_API_KEY)" in err.message
    assert "sk_e…00 (uploaded sealed" in err.message
    assert [a["status"] for a in err.details["attempts"]] == [400, 400]  # the math app's 0.2.17-style refusal
    text = str(err.body())
    assert WRONG not in text and "sk_env_backend_env_key_1111" not in text and ENV_KEY not in text
    assert "<hidden>" in text  # the app's allowed_first15 / got_first15 echo is not passed on


def test_the_first_accepted_key_is_returned(math_app, tmp_path):
    register_environment_key(ENV_KEY, data_dir=tmp_path)  # as `setup --local` does
    register_environment_key(WRONG, source=UPLOADED, data_dir=tmp_path)
    result = require_usable_task_app(math_app, known_environment_keys(tmp_path, environ={}))
    assert result.key is not None and result.key.value == ENV_KEY
    assert [a["status"] for a in result.attempts] == [400, 200]


def test_dead_url_and_a_server_that_is_no_task_app(tmp_path):
    register_environment_key(ENV_KEY, data_dir=tmp_path)
    err = _refusal(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert (err.status_code, err.code) == (400, "task_app_unreachable")
    assert "cannot be reached" in err.message and "synth-ai serve" in err.hint

    from fastapi import FastAPI

    with running_app(FastAPI()) as base:
        err = _refusal(base, tmp_path)
    assert err.code == "task_app_unhealthy" and "404" in err.message


def test_a_task_app_without_its_own_key(tmp_path, monkeypatch):
    from synth_ai.taskapp import create_task_app

    register_environment_key(ENV_KEY, data_dir=tmp_path)
    monkeypatch.delenv("ENVIRONMENT_API_KEY", raising=False)
    with running_app(create_task_app(math_entry().config_factory())) as base:
        assert httpx.get(f"{base}/health", headers={"X-API-Key": ENV_KEY}).status_code == 503
        err = _refusal(base, tmp_path)
    assert err.code == "task_app_has_no_key" and "ENVIRONMENT_API_KEY set" in err.hint
