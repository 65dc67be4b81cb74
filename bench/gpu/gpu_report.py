"""The GPU kit's results: rows with their MFU, `results.json`, `results.md` (prime-rl's BENCHMARKS.md layout: model,
mode, sequence length, GPU, tokens/s, step time, peak memory, MFU; plus who trained, whether the peak fits one
80 GiB GPU, the ratio to the baseline and the issue's targets), the anchors printed beside ours, and one console line
per measured pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_plan import FITS_GIB
from gpu_sft import LORA
from gpu_shapes import SHAPES, mfu

OLD_PATH_TEXT = ("chunked_logprobs = false, activation_checkpointing = false, no token budget, one sample a forward "
                 "pass (as the 2026-11-27 run)")
CPU = "n/a (CPU)"  # the verdicts and targets are about GPU memory: a CPU's peak RSS says nothing of them
TRAINERS = {"ours": "ours", "trl": "TRL", "new": "ours, new defaults", "old": "ours, old path"}

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


def fits(row: dict[str, Any], gpu_gib: float | None) -> str:
    """`yes` / `no`: the peak allocated GPU memory against one 80 GiB GPU; an out-of-memory error on a GPU at least
    that large is a `no` too. `n/a (CPU)` on a CPU, `—` when nothing was measured."""
    if row.get("status") == "ok" and row.get("peak_memory_kind") == "gpu":
        return "yes" if row["peak_memory_gib"] < FITS_GIB else "no"
    if row.get("status") == "ok":
        return CPU
    if row.get("status") == "error" and "out of memory" in row.get("error", "").lower():
        # an "80 GB" GPU has 79.6 GiB: running out of it is not fitting
        return f"no (out of memory on {gpu_gib:.1f} GiB)" if gpu_gib and gpu_gib >= FITS_GIB - 1 else "unknown"
    if row.get("status") == "error" and row.get("peak_memory_kind") == "rss":
        return CPU
    return "—"


def target(row: dict[str, Any]) -> str:
    """The row's target (gpu_plan.TARGET_*) and whether it was met: `≤ 12.5 GiB, ≥ 11,900 tokens/s: met`."""
    goal = row.get("targets") or {}
    if not goal:
        return ""
    parts = []
    if "peak_gib_max" in goal:
        parts.append((f"≤ {goal['peak_gib_max']} GiB", lambda r: r["peak_memory_gib"] <= goal["peak_gib_max"]))
    if "peak_gib_below" in goal:
        parts.append((f"< {goal['peak_gib_below']:.0f} GiB", lambda r: r["peak_memory_gib"] < goal["peak_gib_below"]))
    if "tokens_per_s_min" in goal:
        parts.append((f"≥ {goal['tokens_per_s_min']:,} tokens/s",
                      lambda r: r["tokens_per_s"] >= goal["tokens_per_s_min"]))
    text = ", ".join(name for name, _ in parts)
    if row.get("status") != "ok":
        return f"{text}: {CPU if row.get('peak_memory_kind') == 'rss' else 'not measured'}"
    if row.get("peak_memory_kind") != "gpu":
        return f"{text}: {CPU}"
    missed = [name for name, ok in parts if not ok(row)]
    return f"{text}: " + ("met" if not missed else "missed (" + ", ".join(missed) + ")")


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
    """Against the pair's baseline: SFT, ours / TRL's tokens/s; GSPO, TRL's iteration time / ours; the RL update,
    the old path's peak memory / the new defaults' and the new defaults' time / the old path's."""
    if row["side"] not in ("ours", "new") or row.get("status") != "ok":
        return ""
    other = "trl" if row["side"] == "ours" else "old"
    base = next((r for r in rows if r["pair"] == row["pair"] and r["side"] == other and r.get("status") == "ok"),
                None)
    if base is None:
        return ""
    if row["bench"] == "sft":
        return f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x"
    if row["bench"] == "rl":
        return (f"memory old/new {base['peak_memory_gib'] / row['peak_memory_gib']:.2f}x, time new/old "
                f"{row['step_s'] / base['step_s']:.2f}x")
    return f"{base['step_s'] / row['step_s']:.2f}x"



def _seq(row: dict[str, Any]) -> str:
    if row["bench"] == "gspo":
        return f"{row.get('prompt_tokens', 0):.0f}+{row['seq_len']}"
    if row["bench"] == "rl" and row.get("group", 1) > 1:
        return f"{row['prompt']}+{row['completion']}"
    return str(row["seq_len"])


def _note(row: dict[str, Any]) -> str:
    note = row.get("error") or row.get("note") or ""
    if row["bench"] == "gspo" and row.get("status") == "ok":
        note = (f"iteration {_num(row.get('step_s'), '.2f')} s = rollouts {_num(row.get('rollout_s'), '.2f')} s "
                f"+ update {_num(row.get('update_s'), '.2f')} s; {row.get('samples')} samples")
        if row.get("gradient_checkpointing") is not None:
            note += f"; checkpointing {'on' if row['gradient_checkpointing'] else 'off'}"
    elif row["bench"] == "rl" and row.get("status") == "ok":
        grouped = (f"{row['samples'] // row['group']} prompts x group {row['group']}, shared prompts"
                   if row.get("group", 1) > 1 else f"{row.get('samples')} samples")
        note = (f"GSPO update alone: {grouped}, one optimizer step, checkpointing "
                f"{'on' if row.get('activation_checkpointing') else 'off'}; TRL has no such mode")
    return note.replace("|", "/")


def markdown(document: dict[str, Any]) -> str:
    env = document.get("environment") or {}
    gpu = env.get("device") or "?"
    lines = [f"# GPU kit results ({document['kit']['mode']})", "",
             f"Device: {gpu}. Started {document['kit']['started']}; budget {document['kit']['budget_s']:.0f} s, "
             f"spent {document['kit'].get('spent_s', 0):.0f} s. Versions: "
             + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v) + ".", "",
             ("| Model | Trainer | Bench | Mode | Seq len | GPU | Tokens/s | Step time (s) | Peak memory (GiB) "
              "| Fits 80 GiB | MFU | vs baseline | Target | Note |"),
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = document["rows"]
    for row in rows:
        lines.append(f"| {display_model(row['model'])} | {TRAINERS[row['side']]} | {row['bench']} | {row['mode']} "
                     f"| {_seq(row)} | {gpu} | {_num(row.get('tokens_per_s'), ',.0f')} "
                     f"| {_num(row.get('step_s'), '.3f')} | {_num(row.get('peak_memory_gib'), '.1f')} "
                     f"| {fits(row, env.get('gpu_memory_gib'))} | {_num(row.get('mfu'), '.1%')} "
                     f"| {_ratio(rows, row)} | {target(row)} | {_note(row)} |")
    for anchor in ANCHORS:
        lines.append(f"| {anchor['model']} | {anchor['source']} | {anchor['bench']} | {anchor['mode']} "
                     f"| {anchor['seq_len'] or '—'} | 1x H100 (self-reported) | {anchor['tokens_per_s']:,} | — "
                     f"| {_num(anchor['peak_memory_gib'], '.1f')} | — | — | | | anchor |")
    lines += ["", (f"Peak memory: torch's peak GPU allocation of the measuring process (on a CPU: its peak RSS). "
                   f"Fits 80 GiB: that peak below {FITS_GIB:.0f} GiB. MFU: {FLOPS_FORMULA}. GSPO tokens/s = "
                   f"trained tokens / update seconds. vs baseline: SFT, our tokens/s / TRL's; GSPO, TRL's iteration "
                   f"time / ours; RL update, the old path's peak memory / the new defaults', and the new defaults' "
                   f"time / the old path's. Old path: {OLD_PATH_TEXT}."), ""]
    lines += [f"- {note}" for note in document.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def _side_text(row: dict[str, Any] | None, gpu_gib: float | None = None) -> str:
    if row is None:
        return "not run"
    if row.get("status") == "error":
        return f"error ({row['error']})"
    if row.get("status") == "skipped":
        return f"skipped ({row.get('note')})"
    memory = f"peak {row.get('peak_memory_gib', 0):.2f} GiB {row.get('peak_memory_kind', '')}".rstrip()
    extra = f", MFU {row['mfu']:.1%}" if row.get("mfu") is not None else ""
    if row["bench"] == "rl":
        goal = target(row)
        return (f"{row['tokens_per_s']:,.0f} tokens/s (update {row['step_s']:.3f} s, {memory}{extra}; fits 80 GiB: "
                f"{fits(row, gpu_gib)}" + (f"; target {goal}" if goal else "") + ")")
    if row["bench"] == "sft":
        return f"{row['tokens_per_s']:,.0f} tokens/s (step {row['step_s']:.3f} s, {memory}{extra})"
    return (f"{row['step_s']:.2f} s/iteration (rollouts {_num(row.get('rollout_s'), '.2f')} s, update "
            f"{_num(row.get('update_s'), '.2f')} s, {_num(row.get('tokens_per_s'), ',.0f')} tokens/s, {memory}{extra})")


def pair_line(rows: list[dict[str, Any]], pair: str, device: str, gpu_gib: float | None = None) -> str:
    """`sft  MODEL MODE SEQ [device]: ours ... tokens/s ...; TRL ...; ratio R` (gspo: s/iteration; rl: new defaults
    and old path, fits-80-GiB verdicts and targets)."""
    first = next(r for r in rows if r["pair"] == pair)
    head = f"{first['bench']:<4} {display_model(first['model'])} {first['mode']} "
    if first["bench"] == "rl":
        new = next((r for r in rows if r["pair"] == pair and r["side"] == "new"), None)
        old = next((r for r in rows if r["pair"] == pair and r["side"] == "old"), None)
        line = (f"{head}{first.get('samples')}x{_seq(first)} [{device}]: new defaults {_side_text(new, gpu_gib)}"
                + (f"; old path {_side_text(old, gpu_gib)}" if old else ""))
        ratio = _ratio(rows, new) if new else ""
        return line + (f"; {ratio}" if ratio else "")
    ours = next((r for r in rows if r["pair"] == pair and r["side"] == "ours"), None)
    trl = next((r for r in rows if r["pair"] == pair and r["side"] == "trl"), None)
    shape = f"{first['seq_len']}" if first["bench"] == "sft" else \
        f"{first.get('batch')}x{first.get('group')}x{first['seq_len']}"
    ratio = _ratio(rows, ours) if ours else ""
    return (f"{head}{shape} [{device}]: ours {_side_text(ours)}; TRL {_side_text(trl)}"
            + (f"; ratio {ratio}" if ratio else ""))
