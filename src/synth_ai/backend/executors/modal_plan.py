"""The Modal side of the `modal` executor: what a job asks of Modal (`ModalPlan`, pure data, checked offline) and
the Modal app built from it (`build_app`, imports `modal` but needs no token until it is run).

- GPU: `"<gpu_type>:<gpu_count>"` from `[compute]`; `nodes > 1` adds `modal.experimental.clustered(size=nodes)`.
- Image: Debian slim with this package's dependencies and its `train` extra (torch pinned to this backend's
  version), plus the `vllm` extra for RL jobs (GPU images only); the `synth_ai` source itself comes from here.
- Volume `synth-ai-jobs` mounted at /vol: the job's data dir (`/vol/<job_id>`: its files, checkpoints, final
  model) so a restarted container resumes from the last checkpoint and the backend can read the results.
- Secrets: `synth-ai-training` (HF token and the like) by name; the job's own (its task app's key, its judge's)
  as an ephemeral secret of the run (`remote_needs`).

The remote function body is `remote_job`: it runs the job worker (`synth_ai.backend.jobs.worker.run`), the same job
function the local executor starts, against the job's data dir on the volume.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.executors.placement import JobNeeds
from synth_ai.errors import InvalidInputError

MODAL_GPUS = ("T4", "L4", "A10G", "A100", "A100-40GB", "A100-80GB", "L40S", "H100", "H200", "B200")
VOLUME_NAME = "synth-ai-jobs"
VOLUME_PATH = "/vol"
SECRET_NAME = "synth-ai-training"
APP_PREFIX = "synth-ai-job"
DEFAULT_TIMEOUT_S = 24 * 3600  # Modal's longest function timeout


@dataclass(frozen=True)
class ModalPlan:
    job_id: str
    kind: str
    gpu: str
    nodes: int
    timeout_s: int
    volume: str = VOLUME_NAME
    volume_path: str = VOLUME_PATH
    secrets: tuple[str, ...] = (SECRET_NAME,)
    pip: tuple[str, ...] = field(default_factory=tuple)

    @property
    def app_name(self) -> str:
        return f"{APP_PREFIX}-{self.job_id}"

    @property
    def data_dir(self) -> str:
        return f"{self.volume_path}/{self.job_id}"


def gpu_spec(needs: JobNeeds) -> str:
    name = (needs.gpu_type or "").strip()
    match = next((g for g in MODAL_GPUS if g.lower() == name.lower()), None)
    if match is None:
        raise InvalidInputError(f"[compute].gpu_type {needs.gpu_type!r} is not a Modal GPU.",
                                hint=f"Use one of: {', '.join(MODAL_GPUS)}.")
    if needs.gpu_count > 8:
        raise InvalidInputError(f"[compute].gpu_count {needs.gpu_count} is more than a Modal container has (8).",
                                hint="Use nodes > 1 for more GPUs (Modal clustered functions).")
    return f"{match}:{needs.gpu_count}"


def requirements(extras: tuple[str, ...]) -> tuple[str, ...]:
    """This package's dependencies plus those of `extras`, from its installed metadata; torch pinned to the
    version this backend runs (its checkpoints are read back here)."""
    from importlib.metadata import PackageNotFoundError, requires, version

    out: list[str] = []
    for req in requires("synth-ai") or []:
        spec, _, marker = req.partition(";")
        extra = re.search(r'extra\s*==\s*"([^"]+)"', marker)
        if (marker.strip() and extra is None) or (extra is not None and extra.group(1) not in extras):
            continue  # python_version markers are for older Pythons than the image's
        name = re.split(r"[<>=!~\[ ]", spec.strip(), maxsplit=1)[0]
        if name == "torch":
            try:
                spec = f"torch=={version('torch')}"
            except PackageNotFoundError:
                pass
        if spec.strip() not in out:
            out.append(spec.strip())
    return tuple(out)


def plan_for(job_id: str, needs: JobNeeds, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> ModalPlan:
    extras = ("train", "vllm") if needs.kind == "rl" else ("train",)
    return ModalPlan(job_id=job_id, kind=needs.kind, gpu=gpu_spec(needs), nodes=needs.nodes, timeout_s=timeout_s,
                     pip=requirements(extras))


def build_app(plan: ModalPlan, secrets: dict[str, str] | None = None) -> tuple[Any, Any]:
    """(app, function) for one job. Building needs no token; running (`.spawn`) does. `secrets` (the job's own,
    `remote_needs.job_secrets`) become an ephemeral secret of this app run, by value, stored nowhere else."""
    import modal

    # the training stack from PyPI, this package from this checkout: the container runs the code this backend runs
    image = (modal.Image.debian_slim(python_version="3.11").pip_install(*plan.pip)
             .env({"SYNTH_AI_HOME": plan.data_dir, "HF_HUB_OFFLINE": "0", "HF_HOME": f"{plan.volume_path}/hf"})
             .add_local_python_source("synth_ai"))
    app = modal.App(plan.app_name)
    volume = modal.Volume.from_name(plan.volume, create_if_missing=True)
    attached = [modal.Secret.from_name(name) for name in plan.secrets]
    if secrets:
        attached.append(modal.Secret.from_dict(dict(secrets)))
    body = remote_job
    if plan.nodes > 1:
        clustered = getattr(modal, "clustered", None) or modal.experimental.clustered
        body = clustered(size=plan.nodes)(body)
    function = app.function(gpu=plan.gpu, image=image, volumes={plan.volume_path: volume}, secrets=attached,
                            timeout=plan.timeout_s, name="run_job")(body)
    return app, function


class _VolumeCommitter:
    """In a Modal container: make the job's database visible to the relay every few seconds (a volume shows
    other readers only what was committed; the WAL is folded into the database file first)."""

    def __init__(self, db_path: Any, every_s: float = 5.0) -> None:
        import threading

        self.db_path, self.every_s = db_path, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def commit(self) -> None:
        import sqlite3

        import modal

        conn = sqlite3.connect(self.db_path, timeout=30)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        modal.Volume.from_name(VOLUME_NAME).commit()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.commit()
            except Exception:  # noqa: BLE001 - the next round tries again
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s + 5)
        self.commit()


def _fetch_base_model(model: str) -> None:
    """A registry model into the Hugging Face cache on the volume (HF_HOME), once; the trainer then loads it as
    it does offline. Tiny models are built, fine-tunes and folders are not downloads."""
    from synth_ai.models.registry import find_model

    info = find_model(model)
    if info is None or info.is_local:
        return
    from huggingface_hub import snapshot_download

    snapshot_download(info.id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja",
                                                "tokenizer*"])


def remote_job(job_id: str, data_dir: str) -> dict[str, Any]:
    """The job function on Modal (or here, through `.local()`): the backend's job worker on the job's data dir."""
    os.environ["SYNTH_AI_HOME"] = data_dir
    os.environ["SYNTH_AI_BACKEND_EXECUTOR"] = "local"  # the job runs right here, whatever the submitting backend uses
    from synth_ai.backend.jobs.worker import run
    from synth_ai.backend.server_settings import BackendSettings
    from synth_ai.backend.store.db import Database

    settings = BackendSettings.load()
    settings.ensure_dirs()
    db = Database(settings.db_path)
    db.migrate()  # the job's data dir arrives with its database; a fresh one gets the schema
    from synth_ai.backend.executors.modal_bases import register_staged

    roots = register_staged(settings.data_dir)  # a fine-tune of the backend, uploaded with the job
    job = db.conn().execute("SELECT model FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if job is not None and os.environ.get("MODAL_TASK_ID"):
        for model in {str(job["model"]), *roots}:
            _fetch_base_model(model)
        # the task app is not in this container: the policy it calls is reached through a Modal tunnel
        from synth_ai.backend.trainers.rl.policy_exposure import TUNNEL_ENV

        os.environ.setdefault(TUNNEL_ENV, "modal")
    committer = _VolumeCommitter(settings.db_path) if os.environ.get("MODAL_TASK_ID") else None
    try:
        code = run(job_id)
    finally:
        if committer is not None:
            committer.close()
    row = db.conn().execute(
        "SELECT status, fine_tuned_model, error FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return {"exit_code": code, "status": row["status"] if row else None,
            "fine_tuned_model": row["fine_tuned_model"] if row else None, "error": row["error"] if row else None}
