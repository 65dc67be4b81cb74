"""Any `verifiers` environment served as a synth-ai task app: `synth-ai serve verifiers:<target>`.

`<target>` is the id of an installed environment (taskset) package, or the path of a local module (a `.py` file
or a package directory) that defines one. Supported: the `verifiers.v1` API of verifiers 0.4.0 (a `Taskset` of
`Task`s scored by `@vf.reward` methods; tools as `vf.Toolset`s), run by verifiers' `null` harness (its chat loop:
tools, no code execution) in a local subprocess. Everything here imports `verifiers` lazily: `synth-ai --help` and
the other task apps never load it.

Modules: `target` (what `<target>` names, and the errors when it names nothing), `environment` (the loaded
environment: tasks per split, what `/task_info` says, the serving resources), `relay` (the loopback endpoint the
environment's chat program calls; it forwards to the policy's `inference_url`, `?cid=` included), `episode` (an
episode as a rollout response and a trace), `app` (the task-app entry and its `/rollout`).
"""

from __future__ import annotations

PREFIX = "verifiers:"
ENV_ARGS_VAR = "SYNTH_VERIFIERS_ENV_ARGS"  # JSON object: the taskset's config fields (`serve --env-args`)
REQUIREMENT = "verifiers==0.4.0"


def install_hint() -> str:
    """The fix when verifiers is missing: this synth-ai's own `verifiers` extra (computed when needed: finding the
    install's source reads its metadata, and discovery imports this package on every command that finds apps)."""
    from synth_ai.env.extras import pip_install

    return f"Install the extra: {pip_install('verifiers')} (it pins verifiers 0.4.0)."


def is_verifiers_id(app_id: str | None) -> bool:
    return isinstance(app_id, str) and app_id.startswith(PREFIX)


__all__ = ["ENV_ARGS_VAR", "PREFIX", "REQUIREMENT", "install_hint", "is_verifiers_id"]
