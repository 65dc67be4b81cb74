"""Whether one more Tinker training client fits in memory, checked by `create_model` before its job is queued (the
API process: no torch).

Each client is a worker process with its own copy of the base model (`trainers/tinker`). Its need is estimated from
the model's config.json: the decoder's weights in the load dtype (bf16 where a GPU trains, fp32 on a CPU), its LoRA
adapter with AdamW's state (fp32 weights, gradients and two moments: 16 bytes a parameter), and a headroom for the
worker process, activations and the sampler's KV cache (`HEADROOM_BYTES` plus a tenth of the weights); with
`SYNTH_AI_ROLLOUT_ENGINE=vllm`, its samplers' vLLM engine (another copy of the weights and a fixed KV cache).

The room: with `SYNTH_AI_BACKEND_TINKER_MEMORY_MIB` set, that budget less the needs of every live client; without
it, what the device has free now (a GPU's free memory from nvidia-smi; on a CPU the kernel's MemAvailable) less the
needs of the clients not loaded yet (queued ones, which hold nothing so far). An estimate, like `rl/sharding_plan`'s;
a model whose size cannot be read (no config.json) is not checked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from synth_ai.backend.inference.vllm_options import fixed_kv_cache_bytes
from synth_ai.errors import InvalidInputError

MIB = 1024 ** 2
GIB = 1024 ** 3
HEADROOM_BYTES = 512 * MIB
ADAM_BYTES = 16  # per trained parameter: fp32 weight, gradient, two moments


def client_bytes(model_folder: Path, lora_rank: int, *, on_gpu: bool, vllm: bool = False) -> int | None:
    """Estimated bytes one training client on this model holds (with `vllm`, its samplers' vLLM engine too: a
    second copy of the weights and vLLM's KV cache); None when its config cannot be read."""
    try:
        config = json.loads((Path(model_folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = config.get("text_config") or config
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        inter, vocab, heads = int(text["intermediate_size"]), int(text["vocab_size"]), int(text["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None
    head_dim = int(text.get("head_dim") or hidden // heads)
    kv = int(text.get("num_key_value_heads") or heads) * head_dim
    q = heads * head_dim
    # (in + out) of each linear layer LoRA adapts: q, k, v, o, gate, up, down
    lora_sides = (hidden + q) + 2 * (hidden + kv) + (q + hidden) + 3 * (hidden + inter)
    weights = vocab * hidden * (1 if config.get("tie_word_embeddings", text.get("tie_word_embeddings")) else 2)
    weights += layers * (hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter)
    loaded = weights * (2 if on_gpu else 4)
    adapter = layers * lora_rank * lora_sides * ADAM_BYTES
    engine = loaded + fixed_kv_cache_bytes(on_gpu) if vllm else 0
    return loaded + adapter + HEADROOM_BYTES + loaded // 10 + engine


def refuse_if_it_cannot_fit(need: int | None, live_needs: list[int], queued_needs: list[int], *,
                            budget_mib: int, on_gpu: bool, base_model: str) -> None:
    """InvalidInputError with the numbers and the fixes when a client needing `need` bytes does not fit."""
    if need is None:
        return
    if budget_mib > 0:
        room = budget_mib * MIB - sum(live_needs)
        source = f"the {budget_mib} MiB of SYNTH_AI_BACKEND_TINKER_MEMORY_MIB less the {len(live_needs)} live clients'"
    else:
        free = _gpu_free_bytes() if on_gpu else _cpu_available_bytes()
        if free is None:
            return
        room = free - sum(queued_needs)
        source = (f"the {'GPU' if on_gpu else 'machine'}'s free memory less the {len(queued_needs)} clients "
                  "still loading")
    if need <= room:
        return
    raise InvalidInputError(
        f"A new training client on {base_model} needs about {need / GIB:.2f} GiB (its own copy of the model, its "
        f"LoRA adapter and Adam state, and working memory); {max(room, 0) / GIB:.2f} GiB is left ({source}).",
        hint="Close a client you are done with (ServiceClient.close(), or `synth-ai jobs cancel` its tinkerjob), "
             "use a smaller base model or LoRA rank, or set SYNTH_AI_BACKEND_TINKER_MEMORY_MIB to the memory "
             "Tinker clients may use.")


def _cpu_available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gpu_free_bytes() -> int | None:
    """The first visible GPU's free memory (where a worker's model goes), from nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.split()[0]) * MIB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def needs_of(rows: list[Any]) -> list[int]:
    """The stored estimates of some tinker jobs (their payload's `memory_bytes`)."""
    found = []
    for row in rows:
        payload = json.loads(row["payload"] or "{}")
        if isinstance(payload.get("memory_bytes"), int):
            found.append(payload["memory_bytes"])
    return found
