"""Build the tiny local models deterministically: `synth-ai/tiny-qwen3`, `synth-ai/tiny-qwen3-vl` and
`synth-ai/tiny-qwen3-hd64`.

Recipe (fixed seeds, one CPU thread, so the same machine always produces the same bytes):
1. a byte-level BPE tokenizer (vocab 1,024) trained with `tokenizers` on rendered synthetic chats, with Qwen's
   control tokens added after the merges (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, vision tokens as special;
   `<think>`, `</think>`, `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>` as plain added tokens,
   the way Qwen's tokenizer marks them);
2. `Qwen3ForCausalLM` (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 16, tied embeddings), briefly
   LM-pretrained on chat-formatted synthetic text. A random tiny model cannot be LoRA-tuned (its frozen tied
   embeddings cap the logits, feasibility §3), so this step is what makes LoRA tests meaningful;
3. `Qwen3VLForConditionalGeneration` with a 2-block vision tower: its language model starts from the pretrained
   text weights, then a short pass on captioned generated pictures teaches the tower and projector something.

`synth-ai/tiny-qwen3-hd64` is step 1 and 2 with the shape vLLM's CPU attention kernels accept (they refuse head
sizes below 32): hidden 128, 2 heads / 1 KV head of head_dim 64, MLP 256, the same tokenizer; 0.43M parameters.
It is the model the vLLM rollout engine is run and tested with on a CPU.

The builder writes into the folder it is given; `ModelStore` makes that folder appear atomically and under a lock.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.ml.loading import MODEL_CARD
from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE, QWEN3_VL_TRAINING_TEMPLATE

TINY_TEXT_ID = "synth-ai/tiny-qwen3"
TINY_VL_ID = "synth-ai/tiny-qwen3-vl"
TINY_HD64_ID = "synth-ai/tiny-qwen3-hd64"
TINY_IDS = (TINY_TEXT_ID, TINY_VL_ID, TINY_HD64_ID)
RECIPE_VERSION = 1  # bump whenever the recipe changes: cached builds live in a folder named after it

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
PLAIN_ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# Qwen2/Qwen3 pre-tokenizer split: contractions, letter runs, single digits, punctuation runs, whitespace.
_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class TinyRecipe:
    seed: int = 1234
    vocab_size: int = 1024
    tokenizer_conversations: int = 3000
    hidden_size: int = 64
    intermediate_size: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    pretrain_steps: int = 300
    pretrain_batch: int = 8
    pretrain_seq_len: int = 128
    pretrain_lr: float = 4e-3
    vl_steps: int = 120
    vl_batch: int = 6
    vl_lr: float = 3e-3
    image_size: int = 64


DEFAULT_RECIPE = TinyRecipe()
HD64_RECIPE = TinyRecipe(hidden_size=128, intermediate_size=256, heads=2, kv_heads=1, head_dim=64)
TEXT_RECIPES = {TINY_TEXT_ID: DEFAULT_RECIPE, TINY_HD64_ID: HD64_RECIPE}  # the text models and their recipes


def cache_folder_name(model_id: str) -> str:
    return f"{model_id.split('/')[-1]}-r{RECIPE_VERSION}"


@contextlib.contextmanager
def deterministic_torch(seed: int) -> Iterator[None]:
    """One thread and fixed seeds for the duration of a build; the caller's settings are restored after."""
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    np_state = np.random.get_state()
    py_state = random.getstate()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.random.set_rng_state(state)
        np.random.set_state(np_state)
        random.setstate(py_state)


def strip_control_tokens(text: str) -> str:
    for token in SPECIAL_TOKENS + PLAIN_ADDED_TOKENS:
        text = text.replace(token, "\n")
    return text


def render_chats(conversations: list[dict[str, Any]], template: str) -> list[str]:
    """Render conversations with `template` (those without tools in one call, the others one by one)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    out: list[str | None] = [None] * len(conversations)
    plain = [i for i, c in enumerate(conversations) if not c.get("tools")]
    if plain:
        texts, _ = render_jinja_template([conversations[i]["messages"] for i in plain], chat_template=template)
        for i, text in zip(plain, texts):
            out[i] = text
    for i, conv in enumerate(conversations):
        if out[i] is None:
            out[i] = render_jinja_template([conv["messages"]], chat_template=template, tools=conv["tools"])[0][0]
    return [t or "" for t in out]


def train_tokenizer(recipe: TinyRecipe) -> Any:
    """Byte-level BPE on rendered synthetic chats; returns a transformers fast tokenizer."""
    from synth_ai.backend.ml.corpus import conversation

    rng = random.Random(recipe.seed)
    conversations = [conversation(rng) for _ in range(recipe.tokenizer_conversations)]
    texts = [strip_control_tokens(t) for t in render_chats(conversations, QWEN3_TRAINING_TEMPLATE)]
    texts += [f"A {c} {s} on a {b} background." for c in ("red", "green", "blue", "yellow", "black", "white",
                                                           "orange", "purple")
              for s in ("square", "circle", "triangle", "stripe") for b in ("red", "blue", "white")]
    return bpe_tokenizer(texts, recipe.vocab_size)


def bpe_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE of `vocab_size` tokens (Qwen's control tokens included) trained on `texts`, wrapped as a
    transformers fast tokenizer with Qwen's end-of-turn, padding and training chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = len(SPECIAL_TOKENS) + len(PLAIN_ADDED_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - added, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN_ADDED_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=QWEN3_TRAINING_TEMPLATE, model_max_length=4096, clean_up_tokenization_spaces=False,
    )


def _text_config(recipe: TinyRecipe, tokenizer: Any) -> dict[str, Any]:
    return dict(
        vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers, num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads, head_dim=recipe.head_dim,
        max_position_embeddings=4096, tie_word_embeddings=True, **special_token_ids(tokenizer),
    )


def special_token_ids(tokenizer: Any) -> dict[str, int]:
    """A locally built Qwen3's bos/eos/pad ids, as Qwen's own configs set them: `<|im_end|>` ends a turn and
    `<|endoftext|>` is both start and padding."""
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return {"bos_token_id": eot, "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": eot}


def generation_config_for(tokenizer: Any) -> Any:
    from transformers import GenerationConfig

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=eot, do_sample=False)


def _lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _pretrain_rows(tokenizer: Any, recipe: TinyRecipe, rng: random.Random, rows: int) -> Any:
    import torch

    from synth_ai.backend.ml.corpus import conversation

    need = rows * recipe.pretrain_seq_len
    stream: list[int] = []
    while len(stream) < need:
        batch = [conversation(rng) for _ in range(512)]
        for ids in tokenizer(render_chats(batch, QWEN3_TRAINING_TEMPLATE), add_special_tokens=False)["input_ids"]:
            stream.extend(ids)
    return torch.tensor(stream[:need], dtype=torch.long).view(rows, recipe.pretrain_seq_len)


def build_text(target: Path, recipe: TinyRecipe | None = None, log: Callable[[str], None] | None = None,
               model_id: str = TINY_TEXT_ID) -> dict[str, Any]:
    """Build the tiny text model `model_id` (its `TEXT_RECIPES` recipe unless one is given) into `target` (an empty
    or missing folder). Returns build stats."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    recipe = recipe or TEXT_RECIPES[model_id]
    log = log or (lambda _msg: None)
    started = time.perf_counter()
    with deterministic_torch(recipe.seed):
        tokenizer = train_tokenizer(recipe)
        tokenizer_s = time.perf_counter() - started
        config = Qwen3Config(**_text_config(recipe, tokenizer))
        model = Qwen3ForCausalLM(config)
        model.train()
        rng = random.Random(recipe.seed + 1)
        data = _pretrain_rows(tokenizer, recipe, rng, recipe.pretrain_steps * recipe.pretrain_batch)
        optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.pretrain_lr, betas=(0.9, 0.95),
                                      weight_decay=0.0)
        first = last = float("nan")
        warmup = max(1, recipe.pretrain_steps // 15)
        for step in range(recipe.pretrain_steps):
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, recipe.pretrain_steps, recipe.pretrain_lr, warmup)
            rows = data[step * recipe.pretrain_batch:(step + 1) * recipe.pretrain_batch]
            loss = model(input_ids=rows, labels=rows).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step == 0:
                first = loss.item()
            last = loss.item()
        model.eval()
    target.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config_for(tokenizer)
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    stats = {"id": model_id, "recipe_version": RECIPE_VERSION, "recipe": asdict(recipe),
             "parameters": sum(p.numel() for p in model.parameters()), "pretrain_loss_first": round(first, 4),
             "pretrain_loss_final": round(last, 4), "tokenizer_s": round(tokenizer_s, 2),
             "build_s": round(time.perf_counter() - started, 2)}
    write_card(target, stats)
    log(f"built {model_id}: loss {first:.2f} -> {last:.2f} in {stats['build_s']} s")
    return stats


def build_vl(target: Path, text_dir: Path, recipe: TinyRecipe = DEFAULT_RECIPE,
             log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build `synth-ai/tiny-qwen3-vl` into `target`, starting its language model from the tiny text model."""
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM, Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from synth_ai.backend.ml.corpus import picture, vision_conversation
    from synth_ai.backend.ml.loading import build_processor

    log = log or (lambda _msg: None)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(text_dir), local_files_only=True)
    tokenizer.chat_template = QWEN3_VL_TRAINING_TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text_cfg = _text_config(recipe, tokenizer)
    text_cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                   "mrope_interleaved": True}
    text_cfg.pop("tie_word_embeddings")
    config = Qwen3VLConfig(
        text_config=text_cfg,
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=recipe.hidden_size,
                           num_position_embeddings=64, deepstack_visual_indexes=[0], in_channels=3),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2,
        size={"shortest_edge": 32 * 32, "longest_edge": 128 * 128},
    )
    processor = build_processor(tokenizer, image_processor, QWEN3_VL_TRAINING_TEMPLATE)
    with deterministic_torch(recipe.seed + 7):
        model = Qwen3VLForConditionalGeneration(config)
        text_model = Qwen3ForCausalLM.from_pretrained(str(text_dir), local_files_only=True)
        copied = model.model.language_model.load_state_dict(text_model.model.state_dict(), strict=True)
        del text_model, copied
        model.train()
        rng = random.Random(recipe.seed + 2)
        pad_id = ids["<|endoftext|>"]
        # Text rows ride along every step so the language model keeps what it learned (no forgetting), and the
        # language model moves slower than the fresh vision tower and projector.
        text_rows = _pretrain_rows(tokenizer, recipe, random.Random(recipe.seed + 3), recipe.vl_steps * 2)
        vision = [p for n, p in model.named_parameters() if ".visual." in f".{n}"]
        language = [p for n, p in model.named_parameters() if ".visual." not in f".{n}"]
        optimizer = torch.optim.AdamW([{"params": vision, "scale": 1.0}, {"params": language, "scale": 0.2}],
                                      lr=recipe.vl_lr, betas=(0.9, 0.95), weight_decay=0.0)
        first = last = float("nan")
        warmup = max(1, recipe.vl_steps // 10)
        for step in range(recipe.vl_steps):
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, recipe.vl_steps, recipe.vl_lr, warmup) * group["scale"]
            texts, images = [], []
            for _ in range(recipe.vl_batch):
                image, caption = picture(rng, recipe.image_size)
                conv = vision_conversation(rng, {"type": "image"}, caption)
                texts.append(render_chats([conv], QWEN3_VL_TRAINING_TEMPLATE)[0])
                images.append([image])
            batch = processor(text=texts, images=images, padding=True, return_tensors="pt")
            labels = batch["input_ids"].clone()
            labels[(batch["attention_mask"] == 0) | (labels == ids["<|image_pad|>"]) | (labels == pad_id)] = -100
            loss = model(**batch, labels=labels).loss
            rows = text_rows[step * 2:(step + 1) * 2]
            text_loss = model(input_ids=rows, labels=rows).loss
            (loss + text_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step == 0:
                first = loss.item()
            last = loss.item()
        model.eval()
    target.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config_for(tokenizer)
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    image_processor.save_pretrained(str(target))
    stats = {"id": TINY_VL_ID, "recipe_version": RECIPE_VERSION, "recipe": asdict(recipe),
             "parameters": sum(p.numel() for p in model.parameters()), "pretrain_loss_first": round(first, 4),
             "pretrain_loss_final": round(last, 4), "build_s": round(time.perf_counter() - started, 2)}
    write_card(target, stats)
    log(f"built {TINY_VL_ID}: loss {first:.2f} -> {last:.2f} in {stats['build_s']} s")
    return stats


def write_card(target: Path, stats: dict[str, Any], *, tiny: bool = True) -> None:
    card = {"kind": "base", "tiny": tiny, "model_id": stats["id"], **stats}
    (target / MODEL_CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def weights_digest(folder: Path) -> str:
    """sha256 over the folder's safetensors files (what the determinism test compares)."""
    import hashlib

    digest = hashlib.sha256()
    for file in sorted(Path(folder).glob("*.safetensors")):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()
