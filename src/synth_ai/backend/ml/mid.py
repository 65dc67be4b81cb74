"""Build the mid-size local model deterministically: `synth-ai/random-qwen3-34m`, for compute-bound benchmarks.

The tiny models (`ml/tiny.py`) are so small that a training step is mostly Python overhead. This one is big enough
on a CPU for the model's arithmetic to dominate, and is built in seconds without a download:

1. a byte-level BPE tokenizer of 16,384 tokens (Qwen's control tokens included, as in `tiny`), trained on rendered
   synthetic chats plus Zipf-distributed prose over a made-up lexicon (`corpus.Prose`): the chats alone hold too
   few distinct words to fill a vocabulary this size;
2. `Qwen3ForCausalLM` with Qwen3-0.6B's proportions at a smaller scale: hidden 512, 8 layers, 8 query heads over
   4 KV heads of head_dim 64, MLP 1,536, tied embeddings; 33.6M parameters.

The weights stay random (the id says so): no pretraining, because what it is for is measuring the cost of
training and generation, and pretraining 34M parameters on 2 CPU cores would take most of an hour. Fixed seeds and
one CPU thread make the same machine produce the same bytes. Its model card says `tiny: false`, so the trainers
use torch's default thread count for it, as for a real model.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MID_TEXT_ID = "synth-ai/random-qwen3-34m"
MID_IDS = (MID_TEXT_ID,)
MID_RECIPE_VERSION = 1  # bump whenever the recipe changes: cached builds live in a folder named after it


@dataclass(frozen=True)
class MidRecipe:
    seed: int = 4321
    vocab_size: int = 16384
    lexicon_words: int = 30000
    tokenizer_paragraphs: int = 16000
    tokenizer_conversations: int = 2000
    hidden_size: int = 512
    intermediate_size: int = 1536
    layers: int = 8
    heads: int = 8
    kv_heads: int = 4
    head_dim: int = 64


DEFAULT_MID_RECIPE = MidRecipe()


def mid_cache_folder_name(model_id: str) -> str:
    return f"{model_id.split('/')[-1]}-r{MID_RECIPE_VERSION}"


def mid_prose(recipe: MidRecipe = DEFAULT_MID_RECIPE) -> Any:
    """A `corpus.Prose` over the lexicon the tokenizer was trained on (benches draw their text from it too)."""
    from synth_ai.backend.ml.corpus import Prose, lexicon

    return Prose(lexicon(recipe.seed, recipe.lexicon_words))


def train_mid_tokenizer(recipe: MidRecipe) -> Any:
    from synth_ai.backend.ml.corpus import conversation
    from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE
    from synth_ai.backend.ml.tiny import bpe_tokenizer, render_chats, strip_control_tokens

    rng = random.Random(recipe.seed)
    prose = mid_prose(recipe)
    texts = [prose.paragraph(rng, 60) for _ in range(recipe.tokenizer_paragraphs)]
    conversations = [conversation(rng) for _ in range(recipe.tokenizer_conversations)]
    texts += [strip_control_tokens(t) for t in render_chats(conversations, QWEN3_TRAINING_TEMPLATE)]
    return bpe_tokenizer(texts, recipe.vocab_size)


def build_mid_text(target: Path, recipe: MidRecipe = DEFAULT_MID_RECIPE,
                   log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build `synth-ai/random-qwen3-34m` into `target` (an empty or missing folder). Returns build stats."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from synth_ai.backend.ml.tiny import deterministic_torch, generation_config_for, special_token_ids, write_card

    log = log or (lambda _msg: None)
    started = time.perf_counter()
    with deterministic_torch(recipe.seed):
        tokenizer = train_mid_tokenizer(recipe)
        tokenizer_s = time.perf_counter() - started
        config = Qwen3Config(
            vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
            num_hidden_layers=recipe.layers, num_attention_heads=recipe.heads, num_key_value_heads=recipe.kv_heads,
            head_dim=recipe.head_dim, max_position_embeddings=4096, tie_word_embeddings=True,
            **special_token_ids(tokenizer),
        )
        model = Qwen3ForCausalLM(config).eval()
    target.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config_for(tokenizer)
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    stats = {"id": MID_TEXT_ID, "recipe_version": MID_RECIPE_VERSION, "recipe": asdict(recipe),
             "parameters": sum(p.numel() for p in model.parameters()), "random_weights": True,
             "tokenizer_s": round(tokenizer_s, 2), "build_s": round(time.perf_counter() - started, 2)}
    write_card(target, stats, tiny=False)
    log(f"built {MID_TEXT_ID}: {stats['parameters']:,} parameters in {stats['build_s']} s")
    return stats
