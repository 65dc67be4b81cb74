"""The embedded backend's settings: one table, flag > environment > default, and where its files live.

Every path is under the data dir (`~/.synth-ai/`, or `$SYNTH_AI_HOME`):

    backend_keys.json        accepted API keys (0600); the first one is the default key clients use
    env_keys.json            ENVIRONMENT_API_KEYs known to the backend (0600): registered by setup --local or
                             uploaded sealed (POST /api/v1/env-keys); tried against task apps
    env_key_box.json         the X25519 key pair clients seal env keys to (0600)
    backend/backend.sqlite3  files, jobs, events, metrics, idempotency records (WAL)
    backend/blobs/ab/<sha>   uploaded content, stored once per sha256
    backend/tmp/             uploads in flight (same filesystem as blobs, so the final rename is atomic)
    backend/jobs/<job_id>/   one folder per job: the trainer's workdir (checkpoints) and worker.log
    backend/backend.json     where the running backend listens: {pid, host, port, url, started_at}; clients
                             read it (env/backend_record.py), as the port is 8000 only when that was free
    backend/backend.pid      pid of the running backend
    backend/backend.log      log of a daemon started with `synth-ai backend start`
    backend/warm_worker.log  what the warm worker process printed before it was handed a job
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from synth_ai.env.backend_url import DEFAULT_EMBEDDED_PORT
from synth_ai.env.extras import pip_install
from synth_ai.errors import InvalidInputError

EXECUTORS = ("local", "torchrun", "modal")  # the names `--executor` takes; backend/executors registers one of each
INFERENCE_ENGINES = ("builtin", "vllm")  # SYNTH_AI_INFERENCE_ENGINE: what samples /api/inference
MODAL_TOKEN_HINT = ("Give this backend a Modal token: run `modal token set --token-id … --token-secret …` (or "
                    "`modal token new`), or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the backend's environment, "
                    "then restart it with `synth-ai backend serve --executor modal`.")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024**3  # 20 GiB
DEFAULT_SYNC_VALIDATE_BYTES = 64 * 1024**2  # files up to this size are validated before the upload answers

# name -> (environment variable, meaning). docs/backend.md lists the same table.
ENV_VARS: dict[str, tuple[str, str]] = {
    "max_upload_bytes": ("SYNTH_AI_BACKEND_MAX_UPLOAD_BYTES", "Largest accepted upload in bytes (413 above it)."),
    "sync_validate_bytes": ("SYNTH_AI_BACKEND_SYNC_VALIDATE_BYTES",
                            "Uploads up to this size are validated before the upload request answers; larger ones "
                            "answer `processing` and are validated in the background."),
    "max_concurrent_jobs": ("SYNTH_AI_BACKEND_MAX_JOBS", "Jobs running at once (one worker process each)."),
    "max_interactive_jobs": ("SYNTH_AI_BACKEND_MAX_TINKER_CLIENTS",
                             "Tinker training clients served at once (one worker process and model copy each), "
                             "beside the jobs above; a client asked for beyond it is refused (docs/tinker.md)."),
    "tinker_memory_mib": ("SYNTH_AI_BACKEND_TINKER_MEMORY_MIB",
                          "Memory (MiB) Tinker training clients may use in all; a client that would go past it is "
                          "refused. 0: what the GPU or machine has free when it is created (docs/tinker.md)."),
    "resume_on_restart": ("SYNTH_AI_BACKEND_RESUME",
                          "1: a restarted backend resumes interrupted jobs from their last checkpoint; 0: fails them."),
    "max_attempts": ("SYNTH_AI_BACKEND_MAX_ATTEMPTS", "How many times a job's worker may be started in all."),
    "cancel_grace_s": ("SYNTH_AI_BACKEND_CANCEL_GRACE_S", "Seconds a worker gets to stop after a cancel before SIGKILL."),
    "traces": ("SYNTH_AI_BACKEND_TRACES",
               "Trace databases the dashboard's eval page reads: SQLite files or folders of them, separated by "
               f"'{os.pathsep}' (`backend serve --traces` adds more); ./traces/v3 is always looked at."),
    "warm_worker": ("SYNTH_AI_BACKEND_WARM_WORKER",
                    "1: keep one worker process with the training stack imported, so a job's first step comes in "
                    "seconds (about 400 MB of memory while it waits); 0: every job starts a fresh process."),
    "inference_engine": ("SYNTH_AI_INFERENCE_ENGINE",
                         "What samples /api/inference (and so `synth-ai eval` against this backend): builtin (the "
                         "backend's own engine) or vllm (vLLM, as RL rollouts with a [vllm] table; needs vLLM: "
                         "./scripts/bootstrap.sh --vllm on a CPU machine). See docs/scale.md."),
    "executor": ("SYNTH_AI_BACKEND_EXECUTOR",
                 "What runs jobs: local (one worker process), torchrun (the worker over N local processes, "
                 "data-parallel SFT) or modal (Modal GPUs; needs a Modal token). See docs/scale.md."),
}


def _env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw)) if any(c in raw for c in ".eE") else int(raw)
    except ValueError:
        raise InvalidInputError(f"{name}={raw!r} is not an integer.", hint=f"Set {name} to a whole number.") from None
    if value < minimum:
        raise InvalidInputError(f"{name}={raw!r} must be at least {minimum}.", hint=f"Set {name} >= {minimum}.")
    return value


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise InvalidInputError(f"{name}={raw!r} is not a boolean.", hint=f"Set {name} to 1 or 0.")


@dataclass
class BackendSettings:
    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_EMBEDDED_PORT
    port_fixed: bool = True  # False: `port` is only the first choice; when it is taken, serve takes a free one
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    sync_validate_bytes: int = DEFAULT_SYNC_VALIDATE_BYTES
    max_concurrent_jobs: int = 1
    max_interactive_jobs: int = 4
    tinker_memory_mib: int = 0
    resume_on_restart: bool = True
    max_attempts: int = 3
    cancel_grace_s: int = 15
    warm_worker: bool = True
    traces: list[Path] = field(default_factory=list)
    executor: str = "local"
    inference_engine: str = "builtin"
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, *, data_dir: Path | None = None, host: str | None = None, port: int | None = None,
             traces: list[str] | None = None, executor: str | None = None) -> BackendSettings:
        from synth_ai.env.backend_url import default_port, requested_port
        from synth_ai.env.paths import data_dir as default_data_dir

        chosen = requested_port() if port is None else port  # --port, then SYNTH_AI_BACKEND_PORT: taken as given
        return cls(
            data_dir=Path(data_dir) if data_dir is not None else default_data_dir(),
            host=host or DEFAULT_HOST,
            port=default_port() if chosen is None else chosen,
            port_fixed=chosen is not None,
            max_upload_bytes=_env_int(ENV_VARS["max_upload_bytes"][0], DEFAULT_MAX_UPLOAD_BYTES, minimum=1),
            sync_validate_bytes=_env_int(ENV_VARS["sync_validate_bytes"][0], DEFAULT_SYNC_VALIDATE_BYTES),
            max_concurrent_jobs=_env_int(ENV_VARS["max_concurrent_jobs"][0], 1, minimum=1),
            max_interactive_jobs=_env_int(ENV_VARS["max_interactive_jobs"][0], 4, minimum=1),
            tinker_memory_mib=_env_int(ENV_VARS["tinker_memory_mib"][0], 0),
            resume_on_restart=_env_bool(ENV_VARS["resume_on_restart"][0], True),
            max_attempts=_env_int(ENV_VARS["max_attempts"][0], 3, minimum=1),
            cancel_grace_s=_env_int(ENV_VARS["cancel_grace_s"][0], 15, minimum=0),
            warm_worker=_env_bool(ENV_VARS["warm_worker"][0], True),
            traces=_trace_paths(traces),
            executor=check_executor_name(executor or os.environ.get(ENV_VARS["executor"][0], "") or "local"),
            inference_engine=check_inference_engine(os.environ.get(ENV_VARS["inference_engine"][0], "")),
        )

    # Layout -------------------------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.data_dir / "backend"

    @property
    def db_path(self) -> Path:
        return self.root / "backend.sqlite3"

    @property
    def blobs_dir(self) -> Path:
        return self.root / "blobs"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def job_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in {"0.0.0.0", ""} else self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def ensure_dirs(self) -> None:
        for path in (self.data_dir, self.root):  # they hold keys and the DB: 0700 from the start, not after
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in (self.blobs_dir, self.tmp_dir, self.jobs_dir):
            path.mkdir(parents=True, exist_ok=True)
        for path in (self.data_dir, self.root):
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass


def modal_token_configured() -> bool:
    """A token in the environment or in ~/.modal.toml (looked at, not validated: that needs the network)."""
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return True
    config = Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")
    try:
        text = config.read_text()
    except OSError:
        return False
    return "token_id" in text and "token_secret" in text


def check_executor_name(name: str) -> str:
    value = (name or "local").strip().lower()
    if value not in EXECUTORS:
        raise InvalidInputError(f"Unknown executor {name!r}.", hint=f"Use one of: {', '.join(EXECUTORS)}.")
    if value == "modal" and not modal_token_configured():
        raise InvalidInputError("The modal executor needs a Modal token, and this backend has none.",
                                hint=MODAL_TOKEN_HINT)
    return value


def check_inference_engine(name: str) -> str:
    """SYNTH_AI_INFERENCE_ENGINE's value, checked: a known engine, and vLLM installed when it is vllm."""
    variable = ENV_VARS["inference_engine"][0]
    value = (name or "builtin").strip().lower()
    if value not in INFERENCE_ENGINES:
        raise InvalidInputError(f"{variable}={name!r} is not an inference engine.",
                                hint=f"Use one of: {', '.join(INFERENCE_ENGINES)}.")
    if value == "vllm" and not vllm_installed():
        raise InvalidInputError(f"{variable}=vllm, but vLLM is not installed in this backend's environment.",
                                hint=f"On a CPU machine run {VLLM_CPU_INSTALL_COMMAND}; on a GPU machine "
                                     f"{VLLM_GPU_INSTALL_COMMAND}. Or unset {variable} to serve with the built-in "
                                     "engine.")
    return value


# How vLLM gets installed, and whether it is: here, below the inference layer, so that the backend's settings and
# the engine choice (`inference.vllm_options`, which re-exports them) share one answer.
VLLM_CPU_INSTALL_COMMAND = "./scripts/bootstrap.sh --vllm"
VLLM_GPU_INSTALL_COMMAND = pip_install("vllm")  # this synth-ai's own source, never the index's namesake


def vllm_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def _trace_paths(flags: list[str] | None) -> list[Path]:
    """--traces values, then $SYNTH_AI_BACKEND_TRACES entries, then ./traces/v3 (where `synth-ai eval` writes by
    default), as absolute paths without duplicates; missing ones are kept (the eval page says they are missing)."""
    raw = [*(flags or []), *os.environ.get(ENV_VARS["traces"][0], "").split(os.pathsep), "traces/v3"]
    paths: list[Path] = []
    for entry in raw:
        if entry.strip():
            path = Path(entry.strip()).expanduser().absolute()
            if path not in paths:
                paths.append(path)
    return paths


def state_paths(data_dir: Path) -> tuple[Path, Path, Path]:
    """(backend.json, backend.pid, backend.log) for a data dir."""
    from synth_ai.env.backend_record import record_path

    root = data_dir / "backend"
    return record_path(data_dir), root / "backend.pid", root / "backend.log"
