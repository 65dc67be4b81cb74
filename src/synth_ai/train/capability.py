"""Refusing a training run that the backend cannot carry out, before anything is uploaded or created.

The embedded backend reports in `/health` whether its environment has the training extra (`training.available`,
`training.missing`). A backend that does not say (the hosted API, an older build) is not refused on a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from synth_ai.connect.embedded_backend import stop_started_backend
from synth_ai.client.resources import SynthAPI
from synth_ai.env.backend_url import BackendTarget
from synth_ai.env.extras import install_commands
from synth_ai.errors import (
    AuthError,
    DeadlineError,
    InvalidInputError,
    NetworkError,
    SynthError,
    UnavailableError,
)


class TrainingUnavailableError(UnavailableError):
    code = "training_unavailable"


def training_report(api: SynthAPI) -> dict[str, Any] | None:
    """The backend's `training` capability, or None when it does not report one."""
    from synth_ai.client.identity import NotABackendError

    try:
        doc = api.transport.get_json("/health")
    except (NetworkError, DeadlineError, NotABackendError):
        raise  # no backend to send anything to: say so now rather than after the same retries again
    except SynthError:
        return None  # no such route, or an error answer: it does not report
    training = doc.get("training") if isinstance(doc, dict) else None
    return training if isinstance(training, dict) else None


def ensure_backend_can_train(api: SynthAPI, backend: BackendTarget, rerun: str) -> None:
    """Raise TrainingUnavailableError (exit 10) when the backend says it cannot train; `rerun` is the
    `synth-ai train ...` command line to run again once the extra is installed."""
    training = training_report(api)
    if training is None or training.get("available") is not False:
        return
    missing = [str(m) for m in training.get("missing") or []] or ["its training dependencies"]
    named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
    verb = "is" if len(missing) == 1 else "are"
    extra = str(training.get("extra") or "train")
    steps = install_commands(extra, rerun)
    if backend.embedded and not backend.started_here:
        steps = ("Stop the running backend (`synth-ai backend stop`), then run the command again from an "
                 f"environment with the extra; it starts the backend from there:\n{steps}")
    else:
        steps = f"Add the '{extra}' extra and run the command again:\n{steps}"
    raise TrainingUnavailableError(
        f"The backend at {backend.api_base} cannot train: {named} {verb} not installed in its environment "
        f"(the '{extra}' extra). Nothing was uploaded and no job was created.",
        hint=steps, details={"training": training})


@contextmanager
def released_on_refusal(backend: BackendTarget, say: Callable[[str], None]) -> Iterator[None]:
    """Stop a backend this command started when the run is refused (it cannot train, the dataset or the key is
    rejected): such refusals come before any job exists, and no backend is left running for nothing."""
    try:
        yield
    except (InvalidInputError, UnavailableError, AuthError):
        stop_started_backend(backend, say)
        raise


def rerun_command(configs: list[str], type_: str, dataset: str | None, backend: str | None) -> str:
    """The `synth-ai train` command line to suggest running again (the flags that chose what to train)."""
    import shlex

    parts = ["synth-ai", "train"]
    if type_ != "auto":
        parts += ["--type", type_]
    for config in configs:
        parts += ["--config", config]
    if dataset:
        parts += ["--dataset", dataset]
    if backend:
        parts += ["--backend", backend]
    return shlex.join(parts)
