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
def test_smoke_measures_every_bench_and_writes_results(tmp_path: Path) -> None:
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
    # the GPU plan's order: the RL update pair, the grouped full and LoRA updates, GSPO, SFT
    assert list(rows) == ["rl/smoke/full/256/new", "rl/smoke/full/256/old", "rl/smoke/full/48/new",
                          "rl/smoke/lora/48/new", "gspo/smoke/full/16/ours", "gspo/smoke/full/16/trl",
                          "sft/smoke/full/256/ours", "sft/smoke/full/256/trl"]
    sft, gspo = rows["sft/smoke/full/256/ours"], rows["gspo/smoke/full/16/ours"]
    new, old = rows["rl/smoke/full/256/new"], rows["rl/smoke/full/256/old"]
    full, lora = rows["rl/smoke/full/48/new"], rows["rl/smoke/lora/48/new"]
    for row in (sft, gspo, new, old, full, lora):
        assert row["status"] == "ok", row
        assert row["tokens_per_s"] > 0 and row["step_s"] > 0 and row["peak_memory_gib"] > 0
        assert row["peak_memory_kind"] == "rss" and row["mfu"] is None  # a CPU has no bf16 peak in the table
    assert sft["steps_timed"] == 3
    assert gspo["iterations_timed"] == 2 and gspo["samples"] == 8
    assert gspo["rollout_s"] > 0 and gspo["update_s"] > 0
    assert gspo["gradient_checkpointing"] is False  # recorded from rl.train.started: the CPU's default is off
    # the bench's reward varies at random init: no group was skipped for zero variance, so every update ran
    assert gspo["groups_zero_variance"] == 0 and len(gspo["reward_mean"]) == 3
    # the two paths ran what they say: checkpointing on / off, one optimizer step an update (warm-up + 2 timed)
    assert new["activation_checkpointing"] is True and old["activation_checkpointing"] is False
    assert old["training"]["chunked_logprobs"] is False and "chunked_logprobs" not in new["training"]
    for row in (new, old):
        assert row["steps_timed"] == 2 and row["samples"] == 2 and row["optimizer_steps"] == 3
    for row in (full, lora):  # 2 prompts x group 4, one warm-up and one timed update
        assert row["samples"] == 8 and row["group"] == 4 and row["optimizer_steps"] == 2
        assert row["activation_checkpointing"] is True and row["steps_timed"] == 1
    rl_line = next(line for line in lines if line.startswith("rl   ") and "2x256" in line)
    assert "new defaults " in rl_line and "; old path " in rl_line and "; memory old/new " in rl_line, rl_line
    assert "fits 80 GiB: n/a (CPU); target ≤ 12.5 GiB, ≥ 11,900 tokens/s: n/a (CPU)" in rl_line, rl_line

    trl_installed = importlib.util.find_spec("trl") is not None and importlib.util.find_spec("datasets") is not None
    for row_id in ("sft/smoke/full/256/trl", "gspo/smoke/full/16/trl"):
        row = rows[row_id]
        if trl_installed:
            assert row["status"] == "ok" and row["step_s"] > 0, row
        else:
            assert row["status"] == "error" and "not installed" in row["error"], row
    if trl_installed:  # TRL's GRPO with its default gradient checkpointing, like ours on a GPU
        assert rows["gspo/smoke/full/16/trl"]["gradient_checkpointing"] is True

    table = (out / "results.md").read_text()
    assert ("| Model | Trainer | Bench | Mode | Seq len | GPU | Tokens/s | Step time (s) | Peak memory (GiB) "
            "| Fits 80 GiB | MFU | vs baseline | Target | Note |") in table
    cells = {(c[1], c[2], c[3], c[4]): c for c in (line.split(" | ") for line in table.splitlines()
                                                   if line.startswith("| tiny-qwen3-arch"))}
    assert cells[("ours, new defaults", "rl", "full", "256")][9] == "n/a (CPU)"
    assert cells[("ours, new defaults", "rl", "full", "256")][12] == "≤ 12.5 GiB, ≥ 11,900 tokens/s: n/a (CPU)"
    assert cells[("ours, new defaults", "rl", "full", "256")][11].startswith("memory old/new ")
    assert cells[("ours, old path", "rl", "full", "256")][12] == ""
    for mode in ("full", "lora"):
        row = cells[("ours, new defaults", "rl", mode, "32+16")]
        assert row[9] == "n/a (CPU)" and row[12] == "< 75 GiB: n/a (CPU)", row
        assert "2 prompts x group 4, shared prompts" in row[13], row
    assert cells[("ours", "sft", "full", "256")][9] == "n/a (CPU)"
    assert "| Qwen3-0.6B | prime-rl (trainer only) | sft | full | 8192 |" in table and "26,000" in table
    assert "| Qwen3-0.6B | Unsloth | sft |" in table and "21,300" in table
    # one header line per step: prepare (with the model), eight measurements (the workers' output is logged too)
    steps = re.findall(r"^== [^:\n]+: [0-9.]+ s, ", (out / "kit.log").read_text(), flags=re.MULTILINE)
    assert len(steps) == 9, steps


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
    """A Kit whose workers are replaced at the process boundary by canned results (or errors), TRL installed."""
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
            return {"device": "NVIDIA H100 80GB HBM3", "bf16_peak_flops": 989.4e12, "gpu_memory_gib": 79.6,
                    "data": data, "model": {"parameters": 596_049_920, "build_s": 9.0}, "wall_s": 1.0}
        if name.startswith("model"):
            return {"parameters": 596_049_920, "wall_s": 1.0}
        return dict(results.get(name, {"tokens_per_s": 20_000.0, "step_s": 0.4, "peak_memory_gib": 20.0,
                                       "peak_memory_kind": "gpu", "rollout_s": 5.0, "update_s": 1.0,
                                       "prompt_tokens": 20.0, "completion_tokens_mean": 256.0}), wall_s=1.0)

    monkeypatch.setattr(gpu_kit.Kit, "work", work)
    monkeypatch.setattr(gpu_kit.Kit, "missing", staticmethod(lambda step: None))
    return kit, asked


def test_a_failed_measurement_is_an_error_row_and_the_kit_goes_on(tmp_path, kit_path, monkeypatch, capsys):
    import gpu_plan
    from gpu_shapes import QWEN3

    oom = {"sft/Qwen3-0.6B/full/8192/ours": {"error": "CUDA out of memory: tried to allocate 9 GiB"},
           "rl/Qwen3-0.6B/full/16384/old": {"error": "CUDA out of memory: tried to allocate 9 GiB"}}
    kit, asked = _kit(tmp_path, 10_000, monkeypatch, oom)
    steps = gpu_plan.gpu_plan(["Qwen3-0.6B"])
    try:
        kit.run(steps)
    finally:
        kit.close()
    rows = {r["id"]: r for r in kit.rows}
    assert len(rows) == len(steps) == 12
    assert rows["sft/Qwen3-0.6B/full/8192/ours"]["status"] == "error"
    assert "out of memory" in rows["sft/Qwen3-0.6B/full/8192/ours"]["error"]
    assert all(r["status"] == "ok" for i, r in rows.items() if i not in oom)
    trl = rows["sft/Qwen3-0.6B/full/8192/trl"]
    assert trl["mfu"] == pytest.approx(20_000 * trl["flops_per_token"] / 989.4e12)
    assert trl["flops_per_token"] == QWEN3["Qwen3-0.6B"].train_flops_per_token(8188)  # the rows' mean length
    assert not any(name.startswith("model") for name in asked)  # built once, by the preparation's worker
    assert "Qwen3-0.6B: 596,049,920 parameters, random bf16 weights, built in 9 s" in kit.notes
    printed = capsys.readouterr().out
    assert "sft  Qwen3-0.6B full 8192 [NVIDIA H100 80GB HBM3]: ours error (CUDA out of memory" in printed
    assert ("rl   Qwen3-0.6B full 2x16384 [NVIDIA H100 80GB HBM3]: new defaults 20,000 tokens/s (update 0.400 s, "
            "peak 20.00 GiB gpu, MFU ") in printed
    assert ("fits 80 GiB: yes; target ≤ 12.5 GiB, ≥ 11,900 tokens/s: missed (≤ 12.5 GiB)); old path error (CUDA out "
            "of memory") in printed
    written = json.loads((tmp_path / "results.json").read_text())
    assert [r["id"] for r in written["rows"]] == [s.id for s in steps]
    table = (tmp_path / "results.md").read_text()
    assert ("| ours, old path | rl | full | 16384 | NVIDIA H100 80GB HBM3 | — | — | — | no (out of memory on 79.6 GiB) "
            "|") in table
    assert "| ours, new defaults | rl | full | 16384 |" in table and "| 20.0 | yes |" in table


def test_the_gpu_plan_puts_issue_38s_rows_first_and_compares_like_for_like(kit_path):
    import gpu_plan

    steps = gpu_plan.gpu_plan(["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B"])
    assert [s.id for s in steps[:10]] == [
        "rl/Qwen3-0.6B/full/16384/new", "rl/Qwen3-0.6B/full/16384/old", "rl/Qwen3-4B/full/3072/new",
        "rl/Qwen3-4B/lora/3072/new", "gspo/Qwen3-0.6B/full/256/ours", "gspo/Qwen3-0.6B/full/256/trl",
        "rl/Qwen3-1.7B/full/16384/new", "rl/Qwen3-1.7B/full/16384/old", "rl/Qwen3-4B/full/16384/new",
        "rl/Qwen3-4B/full/16384/old"]
    assert {s.bench for s in steps[10:]} == {"sft", "gspo"} and len(steps) == 10 + 3 * 8 + 2 * 2
    new, old, full, lora = steps[0], steps[1], steps[2], steps[3]
    assert new.job["training"] == {} and new.job["targets"] == {"peak_gib_max": 12.5, "tokens_per_s_min": 11_900}
    assert old.job["training"] == {"chunked_logprobs": False, "activation_checkpointing": False,
                                   "micro_batch_tokens": 1 << 30, "max_accumulated_minibatch": 1}
    assert new.job["prompt"] + new.job["completion"] == 16384 == old.job["prompt"] + old.job["completion"]
    for step in (full, lora):  # the product docs' 4B step: 4 prompts x group 8 of 2k + 1k tokens, the defaults
        assert (step.job["samples"], step.job["group"], step.job["prompt"], step.job["completion"]) == (32, 8, 2048,
                                                                                                       1024)
        assert step.job["training"] == {} and step.job["targets"] == {"peak_gib_below": 75.0}


def test_a_spent_budget_skips_whole_pairs_and_still_writes_results(tmp_path, kit_path, monkeypatch, capsys):
    import gpu_plan

    # the first pair's minimums (the RL update pair, 2 x 18 s) fit; then 60 s: not the GSPO pair (2 x 35 s), but
    # the SFT pair after it (2 x 25 s); then nothing
    budget = gpu_plan.RESERVE_S + 110
    kit, asked = _kit(tmp_path, budget, monkeypatch, {})
    steps = gpu_plan.gpu_plan(["Qwen3-0.6B"])
    original = kit.left
    kit.left = lambda: original() - sum(25 for name in asked if "/" in name)  # each measurement "takes" 25 s
    try:
        kit.run(steps)
    finally:
        kit.close()
    status = {r["id"]: r["status"] for r in kit.rows}
    ran = {"rl/Qwen3-0.6B/full/16384/new", "rl/Qwen3-0.6B/full/16384/old", "sft/Qwen3-0.6B/full/8192/ours",
           "sft/Qwen3-0.6B/full/8192/trl"}
    assert {i for i, s in status.items() if s == "ok"} == ran
    assert all(s == "skipped" for i, s in status.items() if i not in ran) and len(status) == len(steps)
    assert kit.rows[2]["note"].startswith("budget spent: ") and "needs about 70 s" in kit.rows[2]["note"]
    assert "gspo Qwen3-0.6B full 4x8x256 [NVIDIA H100 80GB HBM3]: ours skipped (budget spent" \
        in capsys.readouterr().out
    table = (tmp_path / "results.md").read_text()
    assert "budget spent" in table and "| ours | gspo | full | 0+256 | NVIDIA H100 80GB HBM3 | — | — | — | — |" in table
