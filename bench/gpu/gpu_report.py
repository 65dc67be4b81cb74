"""The GPU kit's results: rows with their MFU, `results.json`, `results.md` (prime-rl's BENCHMARKS.md layout: model,
mode, sequence length, GPU, tokens/s, step time, peak memory, MFU; plus who trained and the ratio to TRL), the
anchors printed beside ours, and one console line per measured pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_sft import LORA
from gpu_shapes import SHAPES, mfu

# Self-reported figures on one H100 that the issue asks us to pass on the same shapes.
ANCHORS = [
    {"source": "prime-rl (trainer only)", "bench": "sft", "model": "Qwen3-0.6B", "mode": "full", "seq_len": 8192,
     "tokens_per_s": 26_000, "peak_memory_gib": None},
    {"source": "prime-rl (trainer only)", "bench": "rl", "model": "Qwen3-0.6B", "mode": "full", "seq_len": 16384,
     "tokens_per_s": 11_900, "peak_memory_gib": 12.5},
    {"source": "Unsloth", "bench": "sft", "model": "Qwen3-0.6B", "mode": "bf16", "seq_len": None,
     "tokens_per_s": 21_300, "peak_memory_gib": None},
]
FLOPS_FORMULA = ("training FLOPs per token: full 6*N + 12*L*H*Q*T, LoRA 4*N + 6*N_lora + 12*L*H*Q*T (N = weights "
                 "of the decoder's matrix multiplies and the LM head, L layers, H heads, Q head dim, T sequence "
                 "length; PaLM appendix B); MFU = FLOPs/s / the GPU's dense bf16 peak; GSPO and RL rows: the update "
                 "only")


def finish_row(row: dict[str, Any], result: dict[str, Any], peak: float | None, tokens_hint: float | None) -> None:
    """Fold a worker's result into its row and work out the MFU (`tokens_hint`: the sequence length the FLOPs
    count uses: the SFT rows' mean length, or a GSPO sample's prompt + completion)."""
    row.update({k: v for k, v in result.items() if k != "error"})
    if result.get("error"):
        row.update(status="error", error=result["error"])
        return
    row["status"] = "ok"
    shape = SHAPES[row["model"]]
    seq = tokens_hint or row["seq_len"]
    flops = shape.train_flops_per_token(round(seq), lora_rank=LORA["r"] if row["mode"] == "lora" else None)
    row["flops_per_token"] = flops
    row["mfu"] = mfu(row.get("tokens_per_s"), flops, peak)


def display_model(model: str) -> str:
    return f"{SHAPES[model].name} (smoke)" if model == "smoke" else model


def write(out: Path, document: dict[str, Any]) -> None:
    """results.json and results.md, each written whole to a temp name and renamed (a kill leaves the last pair)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("results.json", json.dumps(document, indent=2) + "\n"), ("results.md", markdown(document))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def _num(value: Any, fmt: str, missing: str = "—") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else missing


def _ratio(rows: list[dict[str, Any]], row: dict[str, Any]) -> str:
    """ours vs TRL on the same pair: tokens/s ratio for SFT, TRL's iteration time / ours for GSPO."""
    if row["side"] != "ours" or row.get("status") != "ok":
        return ""
    trl = next((r for r in rows if r["pair"] == row["pair"] and r["side"] == "trl" and r.get("status") == "ok"), None)
    if trl is None:
        return ""
    if row["bench"] == "sft":
        return f"{row['tokens_per_s'] / trl['tokens_per_s']:.2f}x"
    return f"{trl['step_s'] / row['step_s']:.2f}x"


def markdown(document: dict[str, Any]) -> str:
    env = document.get("environment") or {}
    gpu = env.get("device") or "?"
    lines = [f"# GPU kit results ({document['kit']['mode']})", "",
             f"Device: {gpu}. Started {document['kit']['started']}; budget {document['kit']['budget_s']:.0f} s, "
             f"spent {document['kit'].get('spent_s', 0):.0f} s. Versions: "
             + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v) + ".", "",
             ("| Model | Trainer | Bench | Mode | Seq len | GPU | Tokens/s | Step time (s) | Peak memory (GiB) | MFU "
              "| vs TRL | Note |"),
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = document["rows"]
    for row in rows:
        seq = f"{row.get('prompt_tokens', 0):.0f}+{row['seq_len']}" if row["bench"] == "gspo" else row["seq_len"]
        note = row.get("error") or row.get("note") or ""
        if row["bench"] == "gspo" and row.get("status") == "ok":
            note = (f"iteration {_num(row.get('step_s'), '.2f')} s = rollouts {_num(row.get('rollout_s'), '.2f')} s "
                    f"+ update {_num(row.get('update_s'), '.2f')} s; {row.get('samples')} samples")
        elif row["bench"] == "rl" and row.get("status") == "ok":
            note = f"GSPO update alone: {row.get('samples')} samples, one optimizer step; TRL has no such mode"
        lines.append(f"| {display_model(row['model'])} | {'ours' if row['side'] == 'ours' else 'TRL'} | {row['bench']} "
                     f"| {row['mode']} | {seq} | {gpu} | {_num(row.get('tokens_per_s'), ',.0f')} "
                     f"| {_num(row.get('step_s'), '.3f')} | {_num(row.get('peak_memory_gib'), '.1f')} "
                     f"| {_num(row.get('mfu'), '.1%')} | {_ratio(rows, row)} | {note.replace('|', '/')} |")
    for anchor in ANCHORS:
        lines.append(f"| {anchor['model']} | {anchor['source']} | {anchor['bench']} | {anchor['mode']} "
                     f"| {anchor['seq_len'] or '—'} | 1x H100 (self-reported) | {anchor['tokens_per_s']:,} | — "
                     f"| {_num(anchor['peak_memory_gib'], '.1f')} | — | | anchor |")
    lines += ["", (f"Peak memory: torch's peak GPU allocation of the measuring process (on a CPU: its peak RSS). "
                   f"MFU: {FLOPS_FORMULA}. GSPO tokens/s = trained tokens / update seconds."), ""]
    lines += [f"- {note}" for note in document.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def _side_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if row.get("status") == "error":
        return f"error ({row['error']})"
    if row.get("status") == "skipped":
        return f"skipped ({row.get('note')})"
    memory = f"peak {row.get('peak_memory_gib', 0):.2f} GiB {row.get('peak_memory_kind', '')}".rstrip()
    extra = f", MFU {row['mfu']:.1%}" if row.get("mfu") is not None else ""
    if row["bench"] in ("sft", "rl"):
        what = "step" if row["bench"] == "sft" else "update"
        return f"{row['tokens_per_s']:,.0f} tokens/s ({what} {row['step_s']:.3f} s, {memory}{extra})"
    return (f"{row['step_s']:.2f} s/iteration (rollouts {_num(row.get('rollout_s'), '.2f')} s, update "
            f"{_num(row.get('update_s'), '.2f')} s, {_num(row.get('tokens_per_s'), ',.0f')} tokens/s, {memory}{extra})")


def pair_line(rows: list[dict[str, Any]], pair: str, device: str) -> str:
    """`sft  MODEL MODE SEQ [device]: ours ... tokens/s ...; TRL ...; ratio R` (gspo: s/iteration)."""
    ours = next((r for r in rows if r["pair"] == pair and r["side"] == "ours"), None)
    trl = next((r for r in rows if r["pair"] == pair and r["side"] == "trl"), None)
    first = ours or trl
    shape = {"sft": f"{first['seq_len']}", "rl": f"{first.get('samples')}x{first['seq_len']}",
             "gspo": f"{first.get('batch')}x{first.get('group')}x{first['seq_len']}"}[first["bench"]]
    baseline = "no trainer-only mode" if first["bench"] == "rl" else _side_text(trl)
    ratio = _ratio(rows, ours) if ours else ""
    return (f"{first['bench']:<4} {display_model(first['model'])} {first['mode']} {shape} [{device}]: "
            f"ours {_side_text(ours)}; TRL {baseline}" + (f"; ratio {ratio}" if ratio else ""))
