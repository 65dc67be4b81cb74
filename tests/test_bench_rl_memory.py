"""`bench/rl_memory.py --smoke`: both variants run one real GSPO update of the tiny Qwen3 in their own processes,
with the same loss, and the bench ends with its one-line ratio."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "rl_memory.py"

pytest.importorskip("torch")


def test_smoke_run_prints_the_ratio_line_and_the_same_loss(tmp_path_factory: pytest.TempPathFactory,
                                                            tiny_text_models: list[Path]) -> None:
    data_dir = tmp_path_factory.getbasetemp() / "ml-core-data"  # where `tiny_text_models` built the tiny Qwen3
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--data-dir", str(data_dir)], capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"update memory ratio \d+\.\d\d, update time ratio \d+\.\d\d", lines[-1]), lines[-1]
    variants = {m.group(1): m for m in (re.match(r"  (old|new): .* loss (\S+), (\d+) micro-batch.*", line)
                                        for line in lines) if m}
    assert variants.keys() == {"old", "new"}
    assert float(variants["old"].group(2)) == pytest.approx(float(variants["new"].group(2)), rel=1e-6, abs=1e-9)
    assert (variants["old"].group(3), int(variants["new"].group(3)) > 1) == ("1", True)  # the budget split it
    assert "'activation_checkpointing': True" in variants["new"].group(0)
