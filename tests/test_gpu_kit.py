"""The GPU kit (bench/gpu) keeps working without a GPU: its smoke runs the whole code path on the CPU, and its
orchestration turns a failed or unaffordable measurement into a row instead of stopping.

The smoke is the real kit: run.sh, a worker process per step, our trainers' entry points, TRL when it is
installed (the `bench` extra; without it the TRL rows must be error rows saying so). No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "bench" / "gpu"


@pytest.fixture
def kit_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(KIT))


@pytest.mark.slow
def test_smoke_measures_both_benches_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("KIT_STARTED", None)
    # a generous budget: a slow CI machine must not turn the rows this test checks into skipped ones
    proc = subprocess.run([str(KIT / "run.sh"), "--smoke", "--out", str(out), "--budget-s", "900"], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("sft ") and "tokens/s" in line for line in lines), proc.stdout
    assert any(line.startswith("gspo ") and "s/iteration" in line for line in lines), proc.stdout

    document = json.loads((out / "results.json").read_text())
    rows = {row["id"]: row for row in document["rows"]}
    assert set(rows) == {"sft/smoke/full/256/ours", "sft/smoke/full/256/trl", "gspo/smoke/full/16/ours",
                         "gspo/smoke/full/16/trl", "rl/smoke/full/256/ours"}
    sft, gspo, update = rows["sft/smoke/full/256/ours"], rows["gspo/smoke/full/16/ours"], rows["rl/smoke/full/256/ours"]
    for row in (sft, gspo, update):
        assert row["status"] == "ok", row
        assert row["tokens_per_s"] > 0 and row["step_s"] > 0 and row["peak_memory_gib"] > 0
        assert row["peak_memory_kind"] == "rss" and row["mfu"] is None  # a CPU has no bf16 peak in the table
    assert sft["steps_timed"] == 3
    assert gspo["iterations_timed"] == 2 and gspo["samples"] == 8
    assert gspo["rollout_s"] > 0 and gspo["update_s"] > 0
    # the bench's reward varies at random init: no group was skipped for zero variance, so every update ran
    assert gspo["groups_zero_variance"] == 0 and len(gspo["reward_mean"]) == 3
    assert update["steps_timed"] == 2 and update["samples"] == 2
    assert any(line.startswith("rl   ") and "TRL no trainer-only mode" in line for line in lines), proc.stdout

    trl_installed = importlib.util.find_spec("trl") is not None and importlib.util.find_spec("datasets") is not None
    for row_id in ("sft/smoke/full/256/trl", "gspo/smoke/full/16/trl"):
        row = rows[row_id]
        if trl_installed:
            assert row["status"] == "ok" and row["step_s"] > 0, row
        else:
            assert row["status"] == "error" and "not installed" in row["error"], row

    table = (out / "results.md").read_text()
    assert "| Model | Trainer | Bench | Mode | Seq len | GPU | Tokens/s | Step time (s) | Peak memory (GiB) | MFU" \
        in table
    assert "| Qwen3-0.6B | prime-rl (trainer only) | sft | full | 8192 |" in table and "26,000" in table
    assert "| Qwen3-0.6B | Unsloth | sft |" in table and "21,300" in table
    # one header line per step: prepare, the model, five measurements (the workers' own output is logged too)
    steps = re.findall(r"^== [^:\n]+: [0-9.]+ s, ", (out / "kit.log").read_text(), flags=re.M)
    assert len(steps) == 7, steps


def test_the_shapes_count_the_parameters_transformers_builds(kit_path: None) -> None:
    """The FLOPs formula's N comes from `Shape`; a model of the same config on the meta device must agree."""
    import torch
    from gpu_shapes import QWEN3, SMOKE
    from transformers import Qwen3Config, Qwen3ForCausalLM

    for shape in [*QWEN3.values(), SMOKE]:
        with torch.device("meta"):
            model = Qwen3ForCausalLM(Qwen3Config(**shape.config()))
        assert sum(p.numel() for p in model.parameters()) == shape.total_params(), shape.name
    assert 590e6 < QWEN3["Qwen3-0.6B"].total_params() < 600e6  # the published 0.6B counts the tied embedding once
    assert 4.0e9 < QWEN3["Qwen3-4B"].total_params() < 4.05e9


def test_mfu_uses_the_stated_formula(kit_path: None) -> None:
    from gpu_shapes import QWEN3, mfu, peak_flops

    shape = QWEN3["Qwen3-0.6B"]
    n = shape.matmul_params()
    assert shape.train_flops_per_token(8192) == 6 * n + 12 * 28 * 16 * 128 * 8192
    assert shape.train_flops_per_token(8192, lora_rank=16) == 4 * n + 6 * shape.lora_params(16) + 12 * 28 * 16 * 128 \
        * 8192
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989.4e12 and peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("CPU (x86_64, 2 threads)") is None
    assert mfu(26_000, shape.train_flops_per_token(8192), 989.4e12) == pytest.approx(
        26_000 * shape.train_flops_per_token(8192) / 989.4e12)


def _kit(tmp_path: Path, budget: float, monkeypatch: pytest.MonkeyPatch, results: dict[str, dict]):
    """A Kit whose workers are replaced at the process boundary by canned results (or errors)."""
    import argparse

    import gpu_kit

    args = argparse.Namespace(out=tmp_path, smoke=False, budget_s=budget, scratch=str(tmp_path),
                              keep_scratch=False, models="Qwen3-0.6B", only="")
    monkeypatch.setenv("KIT_STARTED", str(time.time()))
    kit = gpu_kit.Kit(args)
    asked: list[str] = []

    def work(self, name, job, limit):
        asked.append(name)
        if name == "prepare":
            data = {str(d["seq_len"]): {"rows": d["rows"], "tokens_min": d["seq_len"] - 9,
                                        "tokens_max": d["seq_len"], "tokens_mean": d["seq_len"] - 4.0}
                    for d in job["data"]}
            return {"device": "NVIDIA H100 80GB HBM3", "bf16_peak_flops": 989.4e12, "data": data, "wall_s": 1.0}
        if name.startswith("model"):
            return {"parameters": 596_049_920, "wall_s": 1.0}
        return dict(results.get(name, {"tokens_per_s": 20_000.0, "step_s": 0.4, "peak_memory_gib": 20.0,
                                       "rollout_s": 5.0, "update_s": 1.0, "prompt_tokens": 20.0,
                                       "completion_tokens_mean": 256.0}), wall_s=1.0)

    monkeypatch.setattr(gpu_kit.Kit, "work", work)
    return kit, asked


def test_a_failed_measurement_is_an_error_row_and_the_kit_goes_on(tmp_path, kit_path, monkeypatch, capsys):
    import gpu_plan
    from gpu_shapes import QWEN3

    oom = {"sft/Qwen3-0.6B/full/8192/ours": {"error": "CUDA out of memory: tried to allocate 9 GiB"}}
    kit, asked = _kit(tmp_path, 10_000, monkeypatch, oom)
    steps = gpu_plan.gpu_plan(["Qwen3-0.6B"])
    try:
        kit.run(steps)
    finally:
        kit.close()
    rows = {r["id"]: r for r in kit.rows}
    assert len(rows) == len(steps) == 11
    assert rows["sft/Qwen3-0.6B/full/8192/ours"]["status"] == "error"
    assert "out of memory" in rows["sft/Qwen3-0.6B/full/8192/ours"]["error"]
    assert all(r["status"] == "ok" for i, r in rows.items() if i != "sft/Qwen3-0.6B/full/8192/ours")
    trl = rows["sft/Qwen3-0.6B/full/8192/trl"]
    assert trl["mfu"] == pytest.approx(20_000 * trl["flops_per_token"] / 989.4e12)
    assert trl["flops_per_token"] == QWEN3["Qwen3-0.6B"].train_flops_per_token(8188)  # the rows' mean length
    assert asked.count("model Qwen3-0.6B") == 1  # built once, for all eleven measurements
    printed = capsys.readouterr().out
    assert "sft  Qwen3-0.6B full 8192 [NVIDIA H100 80GB HBM3]: ours error (CUDA out of memory" in printed
    written = json.loads((tmp_path / "results.json").read_text())
    assert [r["id"] for r in written["rows"]] == [s.id for s in steps]


def test_a_spent_budget_skips_whole_pairs_and_still_writes_results(tmp_path, kit_path, monkeypatch, capsys):
    import gpu_plan

    # enough for the model build and the first pair's minimums; then 30 s: not the GSPO pair (2 x 35 s), but the
    # RL update after it (25 s, ours only); then nothing
    budget = gpu_plan.RESERVE_S + 20 + 25 * 2 + 10
    kit, asked = _kit(tmp_path, budget, monkeypatch, {})
    steps = gpu_plan.gpu_plan(["Qwen3-0.6B"])
    original = kit.left
    kit.left = lambda: original() - sum(25 for name in asked if "/" in name)  # each measurement "takes" 25 s
    try:
        kit.run(steps)
    finally:
        kit.close()
    status = {r["id"]: r["status"] for r in kit.rows}
    ran = {"sft/Qwen3-0.6B/full/8192/ours", "sft/Qwen3-0.6B/full/8192/trl", "rl/Qwen3-0.6B/full/16384/ours"}
    assert {i for i, s in status.items() if s == "ok"} == ran
    assert all(s == "skipped" for i, s in status.items() if i not in ran) and len(status) == len(steps)
    assert kit.rows[2]["note"].startswith("budget spent: ") and "needs about 70 s" in kit.rows[2]["note"]
    assert "gspo Qwen3-0.6B full 4x8x256 [NVIDIA H100 80GB HBM3]: ours skipped (budget spent" \
        in capsys.readouterr().out
    assert "budget spent" in (tmp_path / "results.md").read_text()
