"""What each step of an RL plan does when submitted for real: ENVIRONMENT_API_KEY must be set (checked on
entering), then the task app is checked locally (`/health`, `/task_info`) → its key is shared with the backend,
sealed → the backend verifies the app → `create-job` (see `synth_ai.train.plan`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from synth_ai.client.idempotency import IdempotencyStore
from synth_ai.client.resources import SynthAPI
from synth_ai.env.secrets import mask_secret
from synth_ai.errors import (
    AuthError,
    NotFoundError,
    UnavailableError,
    error_for_exit_code,
)
from synth_ai.train import plan
from synth_ai.train.prepare import PreparedTraining
from synth_ai.train.request_bodies import build_rl_payload
from synth_ai.train.submission import Hooks, Submitted, create_job


class RlSteps:
    def __init__(self, prepared: PreparedTraining, api: SynthAPI, *, idempotency: str | None, hooks: Hooks,
                 store: IdempotencyStore) -> None:
        self.config = prepared.config
        assert self.config.task_url
        self.task_url: str = self.config.task_url
        self.api, self.hooks, self.store, self.idempotency = api, hooks, store, idempotency
        self.env_key = ""
        self.env_aliases: list[str] = []
        self.fingerprints: list[str] = []
        self.job_id = ""
        self.job: dict[str, Any] = {}

    def __enter__(self) -> RlSteps:
        from synth_ai.env.environment_key import missing_key_hint, resolve_environment_key

        env_key = resolve_environment_key()
        if env_key is None:
            raise AuthError("ENVIRONMENT_API_KEY is required for RL: the trainer and this check call the task app "
                            "with it.", hint=missing_key_hint())
        self.env_key, self.env_aliases = env_key.value, list(env_key.aliases)
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def actions(self) -> dict[str, Callable[[], None]]:
        return {plan.CHECK_HEALTH: self.check_health, plan.CHECK_TASK_INFO: self.check_task_info,
                plan.SHARE_ENV_KEY: self.share_env_key, plan.VERIFY_TASK_APP: self.verify, plan.CREATE_JOB: self.create}

    def submitted(self) -> Submitted:
        return Submitted("rl", self.job_id, self.api.transport.api_base, job=self.job, fingerprints=self.fingerprints)

    # Locally first: only a key this task app accepts is worth handing to the backend.
    def check_health(self) -> None:
        from synth_ai.taskapp.verify import check_health

        self.hooks.say("Performing task app health check…")
        self._probe(check_health)

    def check_task_info(self) -> None:
        from synth_ai.taskapp.verify import check_task_info

        self._probe(check_task_info)
        self.hooks.say("Task app healthy")

    def _probe(self, probe) -> None:
        check = probe(self.task_url, self.env_key, aliases=self.env_aliases, timeout=_probe_timeout(self.api))
        if not check.ok:
            raise error_for_exit_code(check.exit_code, f"Task app check failed: {check.name}: {check.message}",
                                      hint=f"Check the task app at {self.task_url} (`synth-ai task-app validate "
                                           f"--url {self.task_url}`).")

    def share_env_key(self) -> None:
        """Hand the backend the task app's key (sealed), so its worker can call the app; a backend without the
        env-key routes keeps the keys it already has (the create-time probe says if none works)."""
        from synth_ai.client.env_keys import EnvKeys

        api = self.api
        self.hooks.say(f"Sharing ENVIRONMENT_API_KEY ({mask_secret(self.env_key)}) with the backend, sealed: "
                       f"POST {api.transport.url('/v1/env-keys')}")
        try:
            EnvKeys(api.transport).upload(self.env_key)
        except (NotFoundError, UnavailableError) as exc:
            self.hooks.warn(f"The key was not shared ({exc.message}); the backend uses the keys it already knows.")

    def verify(self) -> None:
        api, task_url = self.api, self.task_url
        self.hooks.say(f"Verifying the task app through the backend: POST {api.transport.url('/rl/verify_task_app')}")
        verdict = api.rl.verify_task_app(task_url)
        if not (isinstance(verdict, dict) and verdict.get("any_ok")):
            raise AuthError(f"The backend could not use the task app at {task_url}: no key/header combination was "
                            "accepted by /health and /task_info.", hint="Check that the task app runs and that its "
                            "ENVIRONMENT_API_KEY is registered with the backend (`synth-ai setup --local`).",
                            details=verdict)
        self.hooks.say("Verification OK")

    def create(self) -> None:
        payload = build_rl_payload(self.config, api_base=self.api.transport.api_base)
        created = create_job(self.api.rl, "rl.create", payload, idempotency=self.idempotency, store=self.store,
                             hooks=self.hooks)
        self.fingerprints = [created.fingerprint]
        self.job_id, self.job = created.job_id, created.doc


def _probe_timeout(api: SynthAPI) -> float:
    """A task-app check's timeout: its usual 10 s, cut to what the command's deadline leaves."""
    from synth_ai.taskapp.verify import DEFAULT_TIMEOUT_S

    left = api.transport.time_left()
    return DEFAULT_TIMEOUT_S if left is None else max(0.1, min(DEFAULT_TIMEOUT_S, left))
