"""The Modal side of the `modal` executor: what a job asks of Modal (`ModalPlan`, pure data, checked offline) and
the Modal app built from it (`build_app`, imports `modal` but needs no token until it is run).

- GPU: `"<gpu_type>:<gpu_count>"` from `[compute]`; `nodes > 1` adds `modal.clustered(size=nodes, rdma=True)`
  (Modal asks a clustered container for all the GPUs of its host: 8).
- Image: Debian slim with this package's dependencies and its `train` extra (torch pinned to this backend's
  version), plus the extras its job kind names (`JobKind.modal_extras`: RL adds `vllm`); the `synth_ai` source
  itself comes from here.
- Volume `synth-ai-jobs` mounted at /vol: the job's data dir (`/vol/<job_id>`: its files, checkpoints, final
  model) so a restarted container resumes from the last checkpoint and the backend can read the results.
- Secrets: `synth-ai-training` (HF token and the like) by name; the job's own (its task app's key, its judge's)
  as an ephemeral secret of the run (`remote_needs`).

The remote function body is `modal_container.remote_job`: the job worker (`synth_ai.backend.jobs.worker`), the same
job function the local executor starts, against the job's data dir on the volume; with more than one GPU or node,
under torchrun over every GPU of every node (gpu_count x nodes ranks, one claim).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.executors.modal_container import VOLUME_NAME, remote_job
from synth_ai.backend.executors.placement import JobNeeds
from synth_ai.backend.jobs.kinds import find_kind
from synth_ai.errors import InvalidInputError

MODAL_GPUS = ("T4", "L4", "A10G", "A100", "A100-40GB", "A100-80GB", "L40S", "H100", "H200", "B200")
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
    def gpu_count(self) -> int:
        return int(self.gpu.rpartition(":")[2])

    @property
    def world_size(self) -> int:
        """The job's ranks: one per GPU of every node (an RL topology may keep some GPUs for rollouts)."""
        return self.gpu_count * self.nodes

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
    if needs.nodes > 1 and needs.gpu_count != 8:
        raise InvalidInputError(
            f"[compute].nodes = {needs.nodes} with gpu_count = {needs.gpu_count}: a Modal cluster's containers each "
            "take all 8 GPUs of their host.", hint="Set [compute].gpu_count = 8, or nodes = 1 for up to 8 GPUs.")
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
    kind = find_kind(needs.kind)
    extras = kind.modal_extras if kind is not None else ("train",)
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
        body = clustered(size=plan.nodes, rdma=True)(body)  # RDMA: the ranks' collectives cross nodes
    function = app.function(gpu=plan.gpu, image=image, volumes={plan.volume_path: volume}, secrets=attached,
                            timeout=plan.timeout_s, name="run_job")(body)
    return app, function
