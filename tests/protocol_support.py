"""What a typing.Protocol declares, for the tests that hold its implementations and users to it (the rollout engine's
`RolloutEngine`, the RL loop's `Trainer`)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

RL_LOOP = Path(__file__).resolve().parents[1] / "src" / "synth_ai" / "backend" / "trainers" / "rl"


def data_members(protocol: type) -> dict[str, Any]:
    """The annotated attributes, with their types."""
    return typing.get_type_hints(protocol)


def methods(protocol: type) -> list[str]:
    """The public members that are not annotated attributes, sorted."""
    data = data_members(protocol)
    return sorted(name for name in vars(protocol) if not name.startswith("_") and name not in data)
