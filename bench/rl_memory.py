"""Bench: the memory of one GSPO update, the old path against the new defaults (issue 38 item 6).

One GSPO update (`GSPOTrainer.train`, the function the RL loop calls) of the `mid` model
(`synth-ai/random-qwen3-34m`, 33.6M parameters, random weights, built once into bench/.cache/rl-data/), full
fine-tune, fp32 on the CPU, one torch thread unless OMP_NUM_THREADS says otherwise, over one group of `--samples`
samples (default 8) sharing a `--prompt`-token prompt (default 64) with `--completion`-token completions (default
2048), random token ids, on-policy old log-probs (computed before the measured update, not counted).

- old (the baseline): `activation_checkpointing = false`, one micro-batch for the whole step
  (`micro_batch_tokens` above the step's size) and, where the trainer has the key, `chunked_logprobs = false`
  (the materialised `[tokens, vocabulary]` log-softmax);
- new: the new defaults as a GPU gets them: `activation_checkpointing = true` (its CUDA default; on the CPU the
  default is off), `micro_batch_tokens` and `chunked_logprobs` unset (their defaults).

Each variant runs in its own process (`--variant`), `--runs` times, interleaved. Measured: the update's peak RSS
above the RSS just before it (Linux's VmHWM, reset through /proc/self/clear_refs; a 1 ms sampling thread where that
cannot be reset), the bytes held for backward (`torch.autograd.graph.saved_tensors_hooks`: every tensor saved,
each storage once, parameters left out, plus the layer inputs a checkpoint keeps), the update's wall time and its
loss (which must be the same). Ends with `update memory ratio <old/new>, update time ratio <new/old>` (targets:
memory >= 4, time <= 1.3).

Reproduce from the repository root:

    .venv/bin/python bench/rl_memory.py                 # mid, 8 x 2048 tokens, 1 run each
    .venv/bin/python bench/rl_memory.py --runs 3
    .venv/bin/python bench/rl_memory.py --smoke         # tiny Qwen3, 8 x 48 tokens: the format, in seconds (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "bench" / ".cache" / "rl-data"
SIZES = {
    "mid": {"model": "synth-ai/random-qwen3-34m", "prompt": 64, "completion": 2048, "micro_batch_tokens": None},
    # the tiny model's whole step is ~400 tokens: a budget of 128 still splits it as the default splits mid's
    "smoke": {"model": "synth-ai/tiny-qwen3", "prompt": 16, "completion": 48, "micro_batch_tokens": 128},
}
ONE_MICRO_BATCH = 1 << 30  # a budget no step reaches: the old single pass

sys.path.insert(0, str(REPO / "src"))


def variant_keys(variant: str, size: dict[str, Any]) -> dict[str, Any]:
    """The `[training]` keys of a variant. `chunked_logprobs` only where the trainer reads it (issue 38 item 1)."""
    from synth_ai.config.rl_schema import TrainingSection

    has_chunked = "chunked_logprobs" in TrainingSection.model_fields
    if variant == "old":
        return {"activation_checkpointing": False, "micro_batch_tokens": ONE_MICRO_BATCH,
                **({"chunked_logprobs": False} if has_chunked else {})}
    keys: dict[str, Any] = {"activation_checkpointing": True}
    if size["micro_batch_tokens"] is not None:
        keys["micro_batch_tokens"] = size["micro_batch_tokens"]
    return keys


def rl_spec(model: str, samples: int, training: dict[str, Any]) -> dict[str, Any]:
    config = {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        "model": {"base": model, "trainer_mode": "full", "label": "bench"},
        "rollout": {"env_name": "bench", "policy_name": "bench", "max_turns": 1, "episodes_per_batch": samples,
                    "max_concurrent_rollouts": samples, "policy_config": {"temperature": 1.0}},
        "training": {"num_epochs": 1, "iterations_per_epoch": 1, "max_turns": 1, "batch_size": 1,
                     "group_size": samples, "learning_rate": 1e-5, "weight_sync_interval": 1, "log_interval": 1,
                     "seed": 1, **training},
    }
    return {"job_id": "bench", "data": {"endpoint_base_url": "http://127.0.0.1:9", "base_model": model,
                                        "config": config}}


class SavedBytes:
    """Bytes held for backward while active: each saved storage once, parameters left out, plus the input a
    checkpointed layer keeps (`trainers.activation_checkpointing`: it saves nothing through these hooks)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.bytes = 0
        self._seen: set[int] = set()
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def _count(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._params and storage.data_ptr() not in self._seen:
            self._seen.add(storage.data_ptr())
            self.bytes += storage.nbytes()

    def _pack(self, tensor: Any) -> Any:
        self._count(tensor)
        return tensor

    def _layer_input(self, layer: Any, args: tuple[Any, ...]) -> None:
        import torch

        if "forward" in vars(layer) and torch.is_grad_enabled() and args:
            self._count(args[0])

    @contextmanager
    def active(self) -> Iterator["SavedBytes"]:
        import torch

        from synth_ai.backend.ml.loading import core_parts
        from synth_ai.backend.trainers.activation_checkpointing import decoder_layers

        hooks = [layer.register_forward_pre_hook(self._layer_input)
                 for layer in decoder_layers(core_parts(self.model)[0])]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor):
                yield self
        finally:
            for hook in hooks:
                hook.remove()


class PeakRSS:
    """The process's peak resident memory while active, above what it held when it started (MiB)."""

    def __enter__(self) -> "PeakRSS":
        self.before = _status("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self._thread = None
        except OSError:
            self._peak, self._stop = self.before, threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._peak = max(self._peak, _status("VmRSS"))

    def __exit__(self, *exc: Any) -> None:
        if self._thread is None:
            peak = _status("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
            peak = self._peak
        self.mib = (peak - self.before) / 1024


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])  # kB
    raise RuntimeError(f"/proc/self/status has no {field}")


def run_variant(variant: str, size_name: str, samples: int, data_dir: Path) -> dict[str, Any]:
    import torch

    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.common import NullContext
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer
    from synth_ai.backend.trainers.rl.types import Sample
    from synth_ai.backend.trainers.rl.update import plan_micro_batches, recompute_old_logprobs

    size = SIZES[size_name]
    settings = resolve_rl_settings(rl_spec(size["model"], samples, variant_keys(variant, size)))
    with tempfile.TemporaryDirectory(prefix="rl-memory-") as work:
        trainer = GSPOTrainer(settings, ModelStore(data_dir), Path(work))
    rng = random.Random(7)
    vocab = trainer.model.config.vocab_size
    prompt = [rng.randrange(10, vocab) for _ in range(size["prompt"])]
    batch = [Sample(prompt_ids=prompt, completion_ids=[rng.randrange(10, vocab) for _ in range(size["completion"])],
                    old_logprobs=[], advantage=(-1.0) ** i * (0.5 + i / samples)) for i in range(samples)]
    recompute_old_logprobs(trainer.policy, batch, settings, NullContext())  # on-policy: ratio 1, nothing clipped
    torch.manual_seed(0)
    saved = SavedBytes(trainer.model)
    with PeakRSS() as rss, saved.active():
        started = time.perf_counter()
        stats = trainer.train(batch)
        seconds = time.perf_counter() - started
    return {"variant": variant, "keys": variant_keys(variant, size), "update_s": seconds, "peak_rss_mib": rss.mib,
            "saved_mib": saved.bytes / 2**20, "loss": stats.loss,
            "micro_batches": len(plan_micro_batches(batch, settings)),
            "activation_checkpointing": trainer.policy.activation_checkpointing, "tokens": sum(s.length for s in batch)}


def run_in_process(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [sys.executable, str(Path(__file__).resolve()), "--variant", variant, "--size", args.size,
               "--samples", str(args.samples), "--data-dir", str(args.data_dir),
               "--completion", str(SIZES[args.size]["completion"])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {variant} variant failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny Qwen3, short completions: the format only")
    parser.add_argument("--size", choices=sorted(SIZES), default="mid")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--completion", type=int, help="completion tokens per sample (default: the size's)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="the model store's data dir")
    parser.add_argument("--variant", choices=["old", "new"], help=argparse.SUPPRESS)  # one measurement, as JSON
    args = parser.parse_args()
    if args.smoke:
        args.size = "smoke"
    if args.completion:
        SIZES[args.size]["completion"] = args.completion
    if args.variant:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        print(json.dumps(run_variant(args.variant, args.size, args.samples, args.data_dir)))
        return
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for _ in range(args.runs):
        for variant in ("old", "new"):
            runs[variant].append(run_in_process(variant, args))
    median = {v: {k: statistics.median(r[k] for r in rs) for k in ("update_s", "peak_rss_mib", "saved_mib", "loss")}
              for v, rs in runs.items()}
    size = SIZES[args.size]
    print(f"rl_memory: {size['model']}, {args.samples} samples x ({size['prompt']} + {size['completion']}) tokens, "
          f"one GSPO update, median of {args.runs}")
    for variant in ("old", "new"):
        first, m = runs[variant][0], median[variant]
        print(f"  {variant}: peak RSS +{m['peak_rss_mib']:.0f} MiB, saved for backward {m['saved_mib']:.0f} MiB, "
              f"{m['update_s']:.2f} s, loss {m['loss']:.9g}, {first['micro_batches']} micro-batch(es), "
              f"keys {first['keys']}")
    print(f"  saved-for-backward ratio {median['old']['saved_mib'] / median['new']['saved_mib']:.2f}")
    memory = median["old"]["peak_rss_mib"] / max(median["new"]["peak_rss_mib"], 1e-9)
    time_ratio = median["new"]["update_s"] / median["old"]["update_s"]
    print(f"update memory ratio {memory:.2f}, update time ratio {time_ratio:.2f}")


if __name__ == "__main__":
    main()
