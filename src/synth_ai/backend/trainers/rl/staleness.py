"""Bounded staleness for asynchronous GSPO: how far behind the trained weights each sample is, and which samples
are too old to train.

Every sampled token carries the policy version that sampled it (the trainer's optimiser steps, `policy_server`'s
`publish`). A sample's staleness is the trainer's version when the update starts less the OLDEST version among its
tokens (a row decoding across a publish counts from its start). A sample more than `max_staleness` steps stale is
dropped before the update and counted. The rollout pool (`rollout_pool`) starts a batch only while it can still be
trained within the bound, so with one optimiser step per iteration nothing is dropped; with several
(`max_accumulated_minibatch`) a batch can fall further behind and its oldest samples are dropped.

A LoRA policy served by vLLM as an adapter has a second check (`drop_stale_adapters`): each sample must carry the
adapter version that the engine published for its policy version (`RolloutEngine.adapter_versions`). A sample
that does not (an older adapter served, or none) is never trained: it is dropped, counted
(`stale_adapter.dropped`) and named in an `rl.adapter.stale` warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.types import Sample

BACKLOG_WARN_BATCHES = 3  # `rl.backlog.growing` when more finished groups wait than this many batches hold


@dataclass
class StalenessReport:
    mean: float
    max: int
    dropped: int

    def record(self) -> dict[str, float]:
        return {"staleness_mean": self.mean, "staleness_max": self.max, "stale_dropped": self.dropped}


def sample_staleness(sample: Sample, trainer_version: int) -> int:
    """Optimiser steps between the oldest weights that sampled `sample` and `trainer_version` (0 untagged)."""
    return max(0, trainer_version - min(sample.versions)) if sample.versions else 0


def drop_stale(samples: list[Sample], trainer_version: int, max_staleness: int) -> tuple[list[Sample],
                                                                                         StalenessReport]:
    """The samples within the bound, in their order, and the staleness of all of them."""
    ages = [sample_staleness(s, trainer_version) for s in samples]
    kept = [s for s, age in zip(samples, ages) if age <= max_staleness]
    return kept, StalenessReport(mean=sum(ages) / len(ages) if ages else 0.0, max=max(ages, default=0),
                                 dropped=len(samples) - len(kept))


def drop_stale_adapters(samples: list[Sample], engine: RolloutEngine, reporter: Any,
                        it: int) -> tuple[list[Sample], dict[str, int]]:
    """The samples sampled through the adapter their policy version was published with, and the record's count of
    the others (none: the engine serves no adapter). Each dropped one is reported with both versions."""
    published = engine.adapter_versions
    if published is None:
        return samples, {}
    kept: list[Sample] = []
    stale: list[dict[str, Any]] = []
    for sample in samples:
        expected = {version: published.get(version) for version in sorted(set(sample.versions))}
        if expected and all(a is not None and a == sample.adapter_version for a in expected.values()):
            kept.append(sample)
        else:
            stale.append({"seed": sample.seed, "rollout_index": sample.rollout_index, "turn": sample.turn,
                          "adapter_version": sample.adapter_version, "expected": expected})
    if stale:
        first = stale[0]
        reporter.event(
            "rl.adapter.stale",
            f"iteration {it}: {len(stale)} sample(s) dropped, sampled with LoRA adapter version "
            f"{first['adapter_version']} where policy version(s) {sorted(first['expected'])} were published as "
            f"adapter version(s) {list(first['expected'].values())}; they are not trained.",
            {"iteration": it, "dropped": len(stale), "samples": stale[:20]}, level="warning")
    return kept, {"stale_adapter_dropped": len(stale)}


class BacklogWatch:
    """Warns once each time the backlog of finished groups grows past BACKLOG_WARN_BATCHES batches (and again
    after it has come back under). The product docs' advice: an instruct model whose rollouts outrun the trainer
    collapses into short, deterministic answers; lower `async_semaphore_max` (or `max_staleness`)."""

    def __init__(self, reporter: Any, batch_groups: int, settings: Any) -> None:
        self.reporter = reporter
        self.limit = BACKLOG_WARN_BATCHES * batch_groups
        self.settings = settings
        self.warned = False

    def check(self, it: int, groups: int) -> None:
        if groups <= self.limit:
            self.warned = False
            return
        if self.warned:
            return
        self.warned = True
        self.reporter.event(
            "rl.backlog.growing",
            f"iteration {it}: {groups} finished groups wait for the trainer (over {BACKLOG_WARN_BATCHES} batches): "
            "rollouts outrun the updates. Instruct models collapse faster with a large backlog; lower "
            "[training].async_semaphore_max (2-4 for instruct models) or [training].max_staleness.",
            {"iteration": it, "backlog_groups": groups, "limit_groups": self.limit,
             "async_semaphore_max": self.settings.concurrency, "max_staleness": self.settings.max_staleness},
            level="warning")
