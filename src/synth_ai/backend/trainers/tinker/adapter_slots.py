"""Which adapter weights a training client's model holds: its own training weights, or the snapshot one of its
sampling clients samples from.

Samplers and training share one model (one copy of the base weights in memory); `hold(name)` copies the named
snapshot's LoRA tensors in (keeping the training weights aside on the model's device) and `hold(None)` puts the
training weights back. Copies happen only when the holder changes, so a batch of samples, or a run of training
calls, pays nothing after its first forward. Callers hold the worker's model lock.

Snapshots live in memory, the most recently used `KEEP` of them (CPU copies); an evicted one is read back from
disk: named sampler weights from their checkpoint folder, and the in-memory ones of
`save_weights_and_get_sampling_client` from a spill file written when they are evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.errors import NotFoundError

KEEP = 8


class AdapterSlots:
    def __init__(self, client: Any, locate: Callable[[str], Path | None], spill_dir: Path) -> None:
        self.client = client
        self.locate = locate  # a named snapshot's file on disk, None when it has none
        self.spill_dir = spill_dir
        self.held: str | None = None  # None: the training weights
        self._training: dict[str, Any] | None = None  # set aside while a snapshot is held
        self._snapshots: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def add(self, name: str, weights: dict[str, Any]) -> None:
        self._snapshots[name] = weights
        self._snapshots.move_to_end(name)
        while len(self._snapshots) > KEEP:
            old, evicted = self._snapshots.popitem(last=False)
            if self.locate(old) is None:  # only in memory until now: keep it reachable
                import torch

                self.spill_dir.mkdir(parents=True, exist_ok=True)
                torch.save(evicted, self.spill_dir / f"{old}.pt")

    def hold(self, name: str | None) -> None:
        if name == self.held:
            return
        if name is None:
            self.client.load_snapshot(self._training)
            self._training = None
        else:
            weights = self._snapshot(name)
            if self.held is None:
                self._training = self.client.snapshot(cpu=False)
            self.client.load_snapshot(weights)
        self.held = name

    def _snapshot(self, name: str) -> dict[str, Any]:
        if name in self._snapshots:
            self._snapshots.move_to_end(name)
            return self._snapshots[name]
        import torch

        spilled = self.spill_dir / f"{name}.pt"
        source = self.locate(name) or (spilled if spilled.exists() else None)
        if source is None:
            raise NotFoundError(f"No sampler weights named '{name}' on this training client.")
        weights = torch.load(source, map_location="cpu")
        self.add(name, weights)
        return weights
