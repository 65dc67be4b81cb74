"""The running batch's lean forward (`inference.lean_forward`) computes exactly what the `transformers` forward does:
same last-position logits and same KV cache, bit for bit, through a left-padded prefill and decoding steps, with
LoRA adapters too; models it does not cover get None (the caller keeps the `transformers` forward). Rows that share
a prompt share one prefilled row and still sample what they would alone."""

from __future__ import annotations

from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore

torch = pytest.importorskip("torch")

TEXT = "synth-ai/tiny-qwen3"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")  # shared with the other ML test modules
    return store.resolve(TEXT)


def _model(folder: Any, attn: str = "sdpa") -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation=attn).eval()


def _prompts(lengths: list[int]) -> tuple[Any, Any, Any]:
    width = max(lengths)
    ids = torch.full((len(lengths), width), 0, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    gen = torch.Generator().manual_seed(1)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(5, 900, (n,), generator=gen)
        mask[row, width - n:] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def _compare(model: Any, lengths: list[int], steps: int = 4) -> None:
    from transformers import DynamicCache

    from synth_ai.backend.inference.lean_forward import lean_decoder
    from synth_ai.backend.ml.loading import cache_argument

    lean = lean_decoder(model)
    assert lean is not None
    ids, mask, positions = _prompts(lengths)
    ours, theirs = lean.new_cache(), DynamicCache()
    with torch.inference_mode():
        for step in range(steps):  # the prefill, then decoding steps
            got = lean.last_logits(ids, mask, positions, ours)
            want = model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(theirs),
                         use_cache=True, logits_to_keep=1).logits[:, -1, :]
            assert torch.equal(got, want), f"step {step}: logits differ by {float((got - want).abs().max())}"
            for a, b in zip(ours.layers, theirs.layers):
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            ids = got.argmax(dim=-1, keepdim=True)
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)


@pytest.mark.parametrize("lengths", [[7, 3, 7, 5], [6, 6]], ids=["left-padded", "no-padding"])
def test_lean_forward_matches_transformers_through_prefill_and_decoding(folder: Any, lengths: list[int]) -> None:
    from synth_ai.backend.inference.lean_forward import lean_decoder

    model = _model(folder)
    lean = lean_decoder(model)
    # the comparison covers the direct kernel calls: no plain linear, norm or SiLU goes through its module here
    layer = lean.layers[0]
    assert not any(isinstance(part, torch.nn.Module) for part in (
        layer.input_norm, layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj, layer.q_norm, layer.k_norm,
        layer.post_norm, layer.gate_proj, layer.up_proj, layer.down_proj, layer.act, lean.final_norm, lean.lm_head))
    _compare(model, lengths)


def test_decoding_writes_into_the_cache_without_copying_it(folder: Any) -> None:
    """Decoding steps append one column into the cache's spare room (no copy of the whole cache per step), and the
    numbers stay those of `transformers` when the room runs out and the cache moves to a bigger buffer."""
    from synth_ai.backend.inference.lean_forward import lean_decoder

    model = _model(folder)
    lean = lean_decoder(model)
    ids, mask, positions = _prompts([7, 3])
    cache = lean.new_cache()
    storages = []
    with torch.inference_mode():
        for _ in range(6):
            ids = lean.last_logits(ids, mask, positions, cache).argmax(dim=-1, keepdim=True)
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((2, 1), dtype=mask.dtype)], dim=1)
            storages.append(cache.layers[0].keys.untyped_storage().data_ptr())
    assert len(set(storages)) == 1 and cache.layers[0].keys.shape[2] == 12
    _compare(model, [7, 3, 7, 5], steps=45)  # 7 columns, room for 16 more, then 23 more: two moves


def test_lean_forward_runs_lora_adapters(folder: Any) -> None:
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_model(folder), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj",
                                                                                                   "down_proj"]))
    with torch.no_grad():  # non-zero adapters, so a forward that skipped them would differ
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    model.eval()
    from synth_ai.backend.inference.lean_forward import lean_decoder

    layer = lean_decoder(model).layers[0]  # adapted layers stay modules, the others are direct calls
    assert isinstance(layer.q_proj, torch.nn.Module) and isinstance(layer.down_proj, torch.nn.Module)
    assert not isinstance(layer.k_proj, torch.nn.Module)
    _compare(model, [7, 3, 7, 5])


def test_lean_forward_calls_hooked_modules_as_modules(folder: Any) -> None:
    """A forward hook (or a forward replaced on the instance, as accelerate's offloading does) must still run."""
    from synth_ai.backend.inference.lean_forward import lean_decoder

    model = _model(folder)
    seen: list[int] = []
    model.model.layers[1].mlp.up_proj.register_forward_hook(lambda _m, _i, out: seen.append(out.shape[0]))
    lean = lean_decoder(model)
    assert isinstance(lean.layers[1].up_proj, torch.nn.Module)
    ids, mask, positions = _prompts([5, 2])
    with torch.inference_mode():
        lean.last_logits(ids, mask, positions, lean.new_cache())
    assert seen == [2]  # the hook ran for the lean forward's call (2 rows)
    _compare(model, [5, 2])


def test_models_it_does_not_cover_keep_the_transformers_forward(folder: Any) -> None:
    from synth_ai.backend.inference.lean_forward import lean_decoder

    assert lean_decoder(_model(folder, attn="eager")) is None
    assert lean_decoder(torch.nn.Linear(2, 2)) is None


def test_rows_sharing_a_prompt_share_its_prefill_and_sample_as_alone(folder: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from transformers import AutoTokenizer

    from synth_ai.backend.inference.decoding import LiveRow, RunningBatch
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.generation import Row

    loaded = describe_model("tiny", Path(folder), _model(folder), AutoTokenizer.from_pretrained(str(folder)),
                            vision=False)
    seen: list[int] = []
    forward = RunningBatch._forward

    def counting(self: Any, ids: Any, *args: Any) -> Any:
        seen.append(int(ids.shape[0]))
        return forward(self, ids, *args)

    def live(seed: int) -> Any:
        row = Row(request=0, max_tokens=8, temperature=1.0, top_p=1.0, top_k=0, budget=None, seed=seed)
        return LiveRow(row=row, owner=None, stops=[],
                       uniforms=torch.rand(8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))

    def run(prompts: list[list[int]], seeds: list[int]) -> list[Any]:
        rows = [live(seed) for seed in seeds]
        batch = RunningBatch(loaded)
        batch.admit(rows, prompts)
        while len(batch):
            batch.step()
        return [(r.row.tokens, r.row.logprobs) for r in rows]

    a, b = [5, 6, 7, 8, 9, 10], [11, 12, 13]
    with monkeypatch.context() as patch:
        patch.setattr(RunningBatch, "_forward", counting)
        together = run([a, a, b, a], [1, 2, 3, 4])
    assert seen[0] == 2  # one prefilled row per distinct prompt
    alone = [run([prompt], [seed])[0] for prompt, seed in ((a, 1), (a, 2), (b, 3), (a, 4))]
    for (tokens, logprobs), (want_tokens, want_logprobs) in zip(together, alone):
        assert tokens == want_tokens
        assert logprobs == pytest.approx(want_logprobs, abs=1e-5)
    assert together[0][0] != together[1][0] or together[0][1] != together[1][1]  # own seeds, own samples
