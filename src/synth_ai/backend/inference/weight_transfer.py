"""The weight-transfer interface of the split topology: how the trainer's weights reach a rollout engine that runs
in its own inference process (`split_engine.py`, `split_process.py`), each transfer carrying the policy version.

One interface, `WeightTransfer`, with two backends:

- `SharedMemoryFiles` ("files", the CPU): `send` writes the weights and their version into one file in a private
  folder of `/dev/shm` (memory-backed; the system temp dir where a machine has none), renamed into place whole, and
  hands the receiver a ticket naming it; `receive` memory-maps it. The previous version's file is removed once the
  next one is delivered. Tested end to end on the CPU (tests/test_rl_split.py).
- `Broadcast` ("nccl" on CUDA, "gloo" on the CPU): the two processes join a two-member process group of their own
  (a TCP store on 127.0.0.1, joined on the first transfer; never the trainer's torchrun group), and `send`
  broadcasts the version and then every tensor from the trainer, in the order the ticket lists them. The same code
  runs with gloo on the CPU (tested in tests/test_rl_split.py); with NCCL it has never run on a GPU in this project.

`send(weights, version, notify)`: `notify(ticket)` is how the ticket reaches the receiver (the engine's control
request, which returns once the receiver has loaded the weights); each backend orders the copy and the notice as it
needs (files: copy, then notify; broadcast: notify in a thread while broadcasting). `receive(ticket)` returns
(version, {name: tensor}) and refuses a transfer whose own version is not the ticket's.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

Ticket = dict[str, Any]
KINDS = ("files", "gloo", "nccl")


class WeightTransfer(Protocol):
    kind: str

    def describe(self) -> dict[str, Any]: ...  # what the other process builds its end from (`transfer_from`)

    def send(self, weights: list[tuple[str, Any]], version: int, notify: Callable[[Ticket], Any]) -> Any: ...

    def receive(self, ticket: Ticket) -> tuple[int, dict[str, Any]]: ...

    def close(self) -> None: ...


class TransferMismatch(RuntimeError):
    """The weights that arrived are not the ones the ticket announced (another version, other tensors)."""


class SharedMemoryFiles:
    kind = "files"

    def __init__(self, folder: str | None = None) -> None:
        self.owner = folder is None  # the trainer's end makes the folder and removes it on close
        self.folder = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="synth-ai-weights-", dir=_memory_dir()))
        self._sent: Path | None = None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "folder": str(self.folder)}

    def send(self, weights: list[tuple[str, Any]], version: int, notify: Callable[[Ticket], Any]) -> Any:
        import torch

        path = self.folder / f"v{version}-{os.getpid()}-{threading.get_ident()}.pt"
        partial = path.with_suffix(".partial")
        torch.save({"version": version, "weights": dict(_detached(weights))}, partial)
        os.replace(partial, path)  # the receiver never sees half a file
        answer = notify({"kind": self.kind, "version": version, "path": str(path)})
        previous, self._sent = self._sent, path
        if previous is not None and previous != path:
            previous.unlink(missing_ok=True)
        return answer

    def receive(self, ticket: Ticket) -> tuple[int, dict[str, Any]]:
        import torch

        payload = torch.load(ticket["path"], map_location="cpu", weights_only=True, mmap=True)
        if payload.get("version") != ticket["version"]:
            raise TransferMismatch(f"the weights file holds version {payload.get('version')}, the ticket says "
                                   f"{ticket['version']}")
        return int(payload["version"]), payload["weights"]

    def close(self) -> None:
        if self.owner:
            shutil.rmtree(self.folder, ignore_errors=True)


class Broadcast:
    """A two-member process group, rank 0 the trainer (see the module doc)."""

    def __init__(self, backend: str, *, address: tuple[str, int] | None = None, device: str = "cpu",
                 timeout_s: float = 600.0) -> None:
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"no broadcast backend {backend!r}")
        self.kind = backend
        self.rank = 0 if address is None else 1
        self.address = address or ("127.0.0.1", _free_port())
        self.device = device
        self.timeout = timedelta(seconds=timeout_s)
        self._group: Any = None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "address": list(self.address)}

    def send(self, weights: list[tuple[str, Any]], version: int, notify: Callable[[Ticket], Any]) -> Any:
        import torch

        tensors = [(name, t.detach().contiguous()) for name, t in weights]
        ticket = {"kind": self.kind, "version": version,
                  "tensors": [[name, list(t.shape), str(t.dtype).removeprefix("torch.")] for name, t in tensors]}
        answer: dict[str, Any] = {}

        def deliver() -> None:
            try:
                answer["value"] = notify(ticket)
            except BaseException as exc:  # noqa: BLE001 - raised in the sender's thread below
                answer["error"] = exc

        thread = threading.Thread(target=deliver, name="weight-notify", daemon=True)
        thread.start()
        self._broadcast(torch.tensor([version], dtype=torch.int64))
        for _, tensor in tensors:
            self._broadcast(tensor.to(self.device))
        thread.join()
        if "error" in answer:
            raise answer["error"]
        return answer.get("value")

    def receive(self, ticket: Ticket) -> tuple[int, dict[str, Any]]:
        import torch

        version = self._broadcast(torch.zeros(1, dtype=torch.int64))
        weights = {}
        for name, shape, dtype in ticket["tensors"]:  # all of them, even for a refusal: both ends stay in step
            weights[name] = self._broadcast(torch.empty(shape, dtype=getattr(torch, dtype), device=self.device))
        if int(version[0]) != ticket["version"]:
            raise TransferMismatch(f"the broadcast carries version {int(version[0])}, the ticket says "
                                   f"{ticket['version']}")
        return int(version[0]), weights

    def close(self) -> None:
        self._group = None

    def _broadcast(self, tensor: Any) -> Any:
        import torch.distributed as dist

        on_device = tensor.to(self.device) if self.kind == "nccl" else tensor.cpu()
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self._joined().broadcast([on_device], options).wait()
        return on_device

    def _joined(self) -> Any:
        if self._group is None:
            import torch.distributed as dist

            host, port = self.address
            store = dist.TCPStore(host, int(port), 2, self.rank == 0, timeout=self.timeout)
            if self.kind == "nccl":
                self._group = _nccl_group(store, self.rank)
            else:
                self._group = dist.ProcessGroupGloo(store, self.rank, 2, self.timeout)
        return self._group


def _nccl_group(store: Any, rank: int) -> Any:
    """NCCL's group of two (written for CUDA machines; never run on a GPU in this project)."""
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available() or not hasattr(dist, "ProcessGroupNCCL"):
        from synth_ai.errors import UnavailableError

        raise UnavailableError("The NCCL weight transfer needs CUDA and a torch built with NCCL.",
                               hint="On a CPU the split topology transfers weights through shared-memory files.")
    return dist.ProcessGroupNCCL(store, rank, 2)


def transfer_for(device: str, requested: str | None = None) -> WeightTransfer:
    """The trainer's end: NCCL for an inference process on a GPU, files on the CPU, unless `requested` names one
    of KINDS."""
    kind = requested or ("nccl" if device.startswith("cuda") else "files")
    if kind not in KINDS:
        from synth_ai.errors import InvalidInputError

        raise InvalidInputError(f"{kind!r} is not a weight transfer.", hint=f"Use one of: {', '.join(KINDS)}.")
    if kind == "files":
        return SharedMemoryFiles()
    return Broadcast(kind, device="cuda" if kind == "nccl" else "cpu")


def transfer_from(described: dict[str, Any]) -> WeightTransfer:
    """The inference process's end of the transfer the trainer described."""
    if described["kind"] == "files":
        return SharedMemoryFiles(described["folder"])
    host, port = described["address"]
    return Broadcast(described["kind"], address=(host, int(port)),
                     device="cuda" if described["kind"] == "nccl" else "cpu")


@contextmanager
def plain_weights(model: Any):  # noqa: ANN201 - a context manager of (name, tensor) pairs
    """The policy's weights as a Hugging Face checkpoint of the plain architecture holds them: a LoRA (PEFT) policy
    merged for the copy and unmerged after, PEFT's wrapping taken off the names. A tied `lm_head.weight` is
    included."""
    peft = hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")
    if peft:
        model.merge_adapter()
    try:
        yield list(_plain_names(model, peft))
    finally:
        if peft:
            model.unmerge_adapter()


def _plain_names(model: Any, peft: bool) -> Any:
    for name, tensor in model.state_dict().items():
        if peft:
            if "lora_" in name or "modules_to_save" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        yield name, tensor.detach()


def _detached(weights: list[tuple[str, Any]]) -> Any:
    for name, tensor in weights:
        yield name, tensor.detach().cpu()


def _memory_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
