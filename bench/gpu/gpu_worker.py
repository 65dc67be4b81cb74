"""One step of the GPU kit in its own process: `python bench/gpu/gpu_worker.py '<job json>'`.

Its own process so that each measurement's peak memory is its own, an out-of-memory error or a crash ends only
that measurement, and the kit can stop one that overruns its time. Prints `RESULT <json>` last: the step's numbers,
or `{"error": ...}`, with the peak memory (GPU: torch's peak allocation; CPU: the process's peak RSS).

Jobs (`kind`): `prepare` (environment facts, the tokenizer, the SFT rows and, when the job names one, the first
model: one process start fewer), `model` (a random-weight model folder),
`sft` and `gspo` (`side` ours or trl; see gpu_sft.py and gpu_gspo.py), `rl` (our GSPO update alone, gpu_gspo.py).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

VERSIONS = ("torch", "transformers", "peft", "accelerate", "tokenizers", "trl", "datasets", "pyarrow", "fsspec",
            "pydantic", "fastapi", "uvicorn")


def environment() -> dict[str, Any]:
    from importlib import metadata

    import torch
    from gpu_shapes import peak_flops

    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    name = torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()}, " \
                                                      f"{torch.get_num_threads()} threads)"
    return {"python": platform.python_version(), "versions": versions, "device": name, "cuda": cuda,
            "cuda_version": torch.version.cuda, "bf16_peak_flops": peak_flops(name) if cuda else None,
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}


def run(job: dict[str, Any]) -> dict[str, Any]:
    import gpu_inputs

    kind = job["kind"]
    if kind == "prepare":
        tokenizer = Path(job["tokenizer"])
        made = {**environment(), "tokenizer": gpu_inputs.build_tokenizer(job["regular_tokens"], tokenizer)}
        made["data"] = {str(d["seq_len"]): gpu_inputs.sft_rows(tokenizer, d["seq_len"], d["rows"], Path(d["path"]))
                        for d in job["data"]}
        if job.get("model"):  # its failure is the model's, not the preparation's
            try:
                made["model"] = build_model(job["model"])
            except Exception as exc:  # noqa: BLE001 - reported as that model's build error
                traceback.print_exc()
                made["model"] = {"error": error_text(exc)}
        return made
    if kind == "model":
        return build_model(job)
    if kind == "sft":
        import gpu_sft

        return gpu_sft.run_ours(job) if job["side"] == "ours" else gpu_sft.run_trl(job)
    if kind in ("gspo", "rl"):
        import gpu_gspo

        if kind == "rl":
            return gpu_gspo.run_update(job)
        return gpu_gspo.run_ours(job) if job["side"] == "ours" else gpu_gspo.run_trl(job)
    raise ValueError(f"unknown job kind {kind!r}")


def build_model(job: dict[str, Any]) -> dict[str, Any]:
    import gpu_inputs
    import torch
    from gpu_shapes import SHAPES

    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    made = gpu_inputs.build_model(SHAPES[job["model"]], Path(job["tokenizer"]), Path(job["model_path"]), device)
    return {**made, "build_s": round(time.perf_counter() - started, 1)}


def peak_memory_gib() -> tuple[float, str]:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30, "gpu"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "rss"


def error_text(exc: BaseException) -> str:
    """One line: a missing package or an out-of-memory error said plainly, else the exception."""
    if isinstance(exc, ImportError) and exc.name:
        return f"{exc.name} is not installed here ({exc})"
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if "out of memory" in text.lower():
        return "CUDA out of memory: " + text[:300]
    return text[:500]


def main() -> None:
    job = json.loads(sys.argv[1])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        result = run(job)
    except Exception as exc:  # noqa: BLE001 - any failure is this measurement's error row; the kit goes on
        traceback.print_exc()
        result = {"error": error_text(exc)}
    peak, where = peak_memory_gib()
    result.update(peak_memory_gib=round(peak, 2), peak_memory_kind=where)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
