"""What the GPU kit trains on, made offline: a tokenizer with Qwen3's id layout, random-weight Qwen3 models, SFT rows
that fill the sequence length, and the GSPO bench's prompts.

- Tokenizer: byte-level BPE trained on the synthetic chat corpus (`ml.tiny.train_tokenizer`), then filled with
  synthetic merges (pairs of tokens it already has) to 151,643 regular tokens, with Qwen's control tokens after them
  (ids 151,643 on, as in Qwen3). Every id a random model can sample below 151,669 decodes to some text, so GSPO
  rewards computed from the text vary from the first iteration.
- Models: `Qwen3ForCausalLM` of a `gpu_shapes.Shape`, initialised on the GPU in bf16 (seconds, not minutes on a CPU)
  and saved as a Hugging Face folder that `ModelStore.resolve` takes by absolute path.
- SFT rows: chats of corpus exchanges appended until the rendered chat (our training template) is as long as the
  sequence length allows, so every row holds about `seq_len` tokens, which is what packing produces; both trainers
  then do the same work without packing. Rows without tools only (the template renders tools in the system turn).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from gpu_shapes import Shape

QWEN_REGULAR_TOKENS = 151_643  # Qwen3's byte-level BPE vocabulary; its control tokens follow
TRAINED_VOCAB = 8192  # what the corpus can support; the rest of the vocabulary is filled
MODEL_CARD = {"kind": "base", "tiny": False, "random_weights": True}
PROMPT_THINGS = ("sky", "grass", "snow", "sun", "coal", "blood", "orange", "plum", "leaf", "sea")


def build_tokenizer(regular_tokens: int, target: Path) -> dict[str, Any]:
    """Train, fill to `regular_tokens`, save to `target`; returns its sizes."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE
    from synth_ai.backend.ml.tiny import TinyRecipe, train_tokenizer

    trained = train_tokenizer(TinyRecipe(vocab_size=min(TRAINED_VOCAB, regular_tokens), tokenizer_conversations=1500))
    state = json.loads(trained.backend_tokenizer.to_str())
    added = sorted(state["added_tokens"], key=lambda t: t["id"])
    vocab: dict[str, int] = {k: v for k, v in state["model"]["vocab"].items() if v < added[0]["id"]}
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in state["model"]["merges"]]
    learned = len(vocab)
    _fill(vocab, merges, regular_tokens)
    state["model"]["vocab"], state["model"]["merges"] = vocab, merges
    for offset, token in enumerate(added):
        token["id"] = regular_tokens + offset
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(state)), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=QWEN3_TRAINING_TEMPLATE, model_max_length=40960, clean_up_tokenization_spaces=False)
    tokenizer.save_pretrained(str(target))
    return {"regular_tokens": regular_tokens, "learned_tokens": learned, "control_tokens": len(added)}


def _fill(vocab: dict[str, int], merges: list[list[str]], size: int) -> None:
    """Add merges of two known tokens (shortest first) until the vocabulary has `size` tokens."""
    pieces = sorted(vocab, key=lambda t: (len(t), vocab[t]))
    width = 16
    while len(vocab) < size:
        width *= 2
        for a in pieces[:width]:
            for b in pieces[:width]:
                if len(vocab) >= size:
                    return
                if a + b not in vocab:
                    vocab[a + b] = len(vocab)
                    merges.append([a, b])


def build_model(shape: Shape, tokenizer_dir: Path, target: Path, device: str, seed: int = 0) -> dict[str, Any]:
    """A random-weight Qwen3 of `shape`, saved (bf16) to `target` with the tokenizer and a model card."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    im_end, eot = (tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
    config = Qwen3Config(**shape.config(), bos_token_id=eot, eos_token_id=im_end, pad_token_id=eot)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=eot,
                                               do_sample=False)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    params = sum(p.numel() for p in model.parameters())
    (target / "synth_model.json").write_text(json.dumps({**MODEL_CARD, "model_id": shape.name, "parameters": params,
                                                         "shape": shape.__dict__}, indent=2) + "\n")
    return {"parameters": params, "expected_parameters": shape.total_params()}


def sft_rows(tokenizer_dir: Path, seq_len: int, rows: int, target: Path, seed: int = 7) -> dict[str, Any]:
    """`rows` chats of at most `seq_len` tokens each as JSONL; returns their token lengths."""
    from transformers import AutoTokenizer

    from synth_ai.backend.trainers.sft.data import render

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    rng = random.Random(seed)

    def length(messages: list[dict[str, Any]]) -> int:
        return len(tokenizer(render(messages, None, tokenizer.chat_template)[0], add_special_tokens=False)["input_ids"])

    lines, lengths = [], []
    for _ in range(rows):
        messages: list[dict[str, Any]] = []
        guess = 0  # tokens of the contents: below the rendered count, which adds each turn's markers
        while guess < seq_len:
            pair = _exchange(rng)
            guess += sum(len(tokenizer(m["content"], add_special_tokens=False)["input_ids"]) for m in pair)
            messages.extend(pair)
        while len(messages) > 2 and length(messages) > seq_len:
            del messages[-2:]
        lengths.append(length(messages))
        lines.append(json.dumps({"messages": messages}))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    return {"rows": rows, "tokens_min": min(lengths), "tokens_max": max(lengths),
            "tokens_mean": sum(lengths) / len(lengths)}


def _exchange(rng: random.Random) -> list[dict[str, str]]:
    """A user turn of the corpus and a long answer (several corpus answers joined): SFT data is mostly answer."""
    from synth_ai.backend.ml.corpus import conversation

    def plain() -> list[dict[str, Any]]:
        while True:
            conv = conversation(rng)
            if not conv.get("tools"):
                return [m for m in conv["messages"] if m["role"] != "system"]

    user, answer = plain()
    parts = [answer["content"]] + [plain()[1]["content"] for _ in range(rng.randint(6, 18))]
    return [{"role": "user", "content": user["content"]}, {"role": "assistant", "content": " ".join(parts)}]


def gspo_prompt(seed: int) -> str:
    thing = PROMPT_THINGS[seed % len(PROMPT_THINGS)]
    return f"Describe the {thing} in one long paragraph."


def gspo_reward(text: str) -> float:
    """The GSPO bench's reward: the share of the answer's characters that are ASCII lower-case letters. Any text
    scores, so a random policy's samples differ and every group carries a signal from the first iteration."""
    text = text or ""
    return round(sum("a" <= c <= "z" for c in text) / len(text), 4) if text else 0.0


def prompt_tokens(tokenizer_dir: Path, seeds: range) -> float:
    """Mean token count of the GSPO prompts as the policy sees them (chat template, generation prompt)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    counts = [len(tokenizer.apply_chat_template([{"role": "user", "content": gspo_prompt(s)}], tokenize=True,
                                                add_generation_prompt=True, return_dict=False)) for s in seeds]
    return sum(counts) / len(counts)
