"""One Tinker training client's model in its worker: the base model with a LoRA adapter, its AdamW state, and the
operations the SDK asks for (forward, forward_backward with a loss, optim_step, saving and loading state, and
snapshots of the adapter for sampling).

The losses are `losses.token_losses` (summed over tokens and datums; gradients accumulate across forward_backward
calls until optim_step). The log-probs go through `ml.token_logprobs` (no [tokens, vocabulary] logits tensor), as
SFT's and RL's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from synth_ai.backend.ml import loading
from synth_ai.backend.ml.token_logprobs import lm_head_scores
from synth_ai.backend.store.tinker_checkpoints import OPTIMIZER_FILE, TRAINABLE_FILE
from synth_ai.backend.trainers.tinker.losses import token_losses
from synth_ai.backend.trainers.runtime import choose_runtime, load_trainable_policy, with_lora
from synth_ai.config.tinker_settings import TinkerSettings
from synth_ai.errors import InvalidInputError



class ClientModel:
    def __init__(self, settings: TinkerSettings, model_store: Any) -> None:
        self.settings = settings
        runtime = choose_runtime(model_store, settings.base_model)
        policy = load_trainable_policy(model_store, settings.base_model, runtime, settings, seed=settings.seed,
                                       full_mode_merges_adapter=True)
        self.model = with_lora(policy, settings, runtime)
        self.tokenizer_path = policy.tokenizer_path
        self.tokenizer = loading.load_tokenizer(policy.tokenizer_path)  # once: every checkpoint writes it out
        self.base_path = runtime.base_path
        self.device = runtime.where.device
        self.decoder, self.lm_head = loading.core_parts(self.model)
        self.trainable = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        defaults = {"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-12, "weight_decay": 0.0}
        self.optimizer = torch.optim.AdamW(list(self.trainable.values()), **defaults)
        self.steps = 0
        self.pending_loss = 0.0  # summed loss of the forward_backward calls since the last optim_step

    # Forward and backward ---------------------------------------------------------------------------------------
    def forward_backward(self, request: dict[str, Any], *, backward: bool) -> dict[str, Any]:
        loss_fn, config = request["loss_fn"], request.get("loss_fn_config") or {}
        outputs, total = [], 0.0
        self.model.train(backward)
        for datum in request["data"]:
            with torch.set_grad_enabled(backward):
                targets = datum["inputs"]["target_tokens"]
                logprobs = self._logprobs(datum["tokens"], targets["values"], targets["shape"])
                per_token = token_losses(loss_fn, logprobs, datum["inputs"], config)
                loss = per_token.sum()
                if backward:
                    loss.backward()
            total += float(loss.detach())
            outputs.append({"logprobs": logprobs.detach().float().cpu().tolist(),
                            "elementwise_loss": per_token.detach().float().cpu().tolist()})
        if backward:
            self.pending_loss += total
        return {"outputs": outputs, "metrics": {"loss:sum": total}}

    def prompt_logprobs(self, tokens: list[int]) -> list[float | None]:
        """log p(tokens[i] | tokens[:i]) as a `forward` of the same tokens scores them; None for the first."""
        if len(tokens) < 2:
            return [None] * len(tokens)
        self.model.train(False)
        with torch.no_grad():
            scored = self._logprobs(tokens[:-1], tokens[1:])
        return [None, *scored.float().cpu().tolist()]

    def _logprobs(self, tokens: list[int], targets: list[Any], shape: list[int] | None = None) -> Any:
        """Log-probs of `targets` ([tokens], or [tokens, K]: K targets scored at each position)."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        hidden = self.decoder(input_ids=ids, use_cache=False).last_hidden_state[0]  # no KV cache to train
        wanted = torch.tensor([int(t) for t in targets], dtype=torch.long, device=self.device)
        columns = shape[1] if shape and len(shape) == 2 else 0
        if columns:  # each position's hidden state once per target column
            hidden = hidden.unsqueeze(1).expand(-1, columns, -1).reshape(-1, hidden.shape[-1])
        scores = lm_head_scores(self.lm_head, hidden, wanted).logprobs
        return scores.view(-1, columns) if columns else scores

    def optim_step(self, adam: dict[str, Any] | None) -> dict[str, Any]:
        adam = adam or {}
        lr = float(adam.get("learning_rate", 1e-4))
        for group in self.optimizer.param_groups:
            group.update(lr=lr, betas=(float(adam.get("beta1", 0.9)), float(adam.get("beta2", 0.95))),
                         eps=float(adam.get("eps", 1e-12)), weight_decay=float(adam.get("weight_decay", 0.0)))
        params = list(self.trainable.values())
        clip = float(adam.get("grad_clip_norm", 0.0) or 0.0)
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        loss, self.pending_loss = self.pending_loss, 0.0
        return {"metrics": {"grad_norm:mean": float(norm), "learning_rate:mean": lr}, "loss": loss}

    # State ------------------------------------------------------------------------------------------------------
    def snapshot(self, *, cpu: bool = True) -> dict[str, Any]:
        """The adapter's weights now (copies, on the CPU or where they live): what a sampler saved at this point
        samples with."""
        return {name: p.detach().to("cpu" if cpu else p.device, copy=True) for name, p in self.trainable.items()}

    def load_snapshot(self, weights: dict[str, Any]) -> None:
        missing = sorted(set(self.trainable) - set(weights))
        if missing:
            raise InvalidInputError(f"The saved state does not fit this training client: it lacks {missing[:2]} "
                                    f"({len(missing)} tensors). Was it saved from another base model or rank?")
        with torch.no_grad():
            for name, p in self.trainable.items():
                if weights[name].shape != p.shape:
                    raise InvalidInputError(f"The saved state's {name} has shape {tuple(weights[name].shape)}, "
                                            f"this client's {tuple(p.shape)}: another LoRA rank or base model.")
                p.copy_(weights[name].to(p.device, p.dtype))

    def save_state(self, folder: Path, model_id: str) -> None:
        """A `save_state` checkpoint: the model folder of `save_adapter` plus the Adam state and step count."""
        self.save_adapter(folder, model_id)
        torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps}, folder / OPTIMIZER_FILE)

    def load_state(self, folder: Path, *, optimizer: bool) -> None:
        self.load_snapshot(torch.load(folder / TRAINABLE_FILE, map_location="cpu"))
        self.optimizer.zero_grad(set_to_none=True)
        self.pending_loss = 0.0
        if optimizer:
            saved = torch.load(folder / OPTIMIZER_FILE, map_location="cpu")
            self.optimizer.load_state_dict(saved["optimizer"])
            self.steps = int(saved["steps"])

    def save_final(self, folder: Path, model_id: str, summary: dict[str, Any]) -> None:
        """The job's fine-tuned model, written as the SFT and RL trainers write theirs (adapter, tokenizer, chat
        template, model card)."""
        from synth_ai.backend.trainers.common import save_final

        save_final(self.model, self.tokenizer, self.base_path, folder, self.settings, model_id, summary)

    def save_adapter(self, folder: Path, model_id: str) -> None:
        """The adapter as a fine-tuned model's folder (what `models export`, the inference endpoint and vLLM load)
        with its tensors beside it for `load_state` and the samplers (`trainable.pt`)."""
        from synth_ai.backend.trainers.common import write_model_files

        summary = {"steps": self.steps, "source": "tinker", "tinker_model_id": self.settings.model_id}
        write_model_files(self.model, self.tokenizer, self.base_path, folder, self.settings, model_id, summary)
        torch.save(self.snapshot(), folder / TRAINABLE_FILE)
