"""The built-in rollout engine's sampling copy in a dtype of its own (bf16 for a full fine-tune on a CUDA GPU,
`engine_choice.sampling_dtype`), exercised on the CPU by forcing bf16: the engine serves a frozen bf16 copy even when
it would share the trainer's weights, a publish refreshes it with the trainer's new weights and moves the version
tags, and nothing changes the copy in between."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

torch = pytest.importorskip("torch")

BODY = {"model": "m", "messages": [{"role": "user", "content": "What color is the sky?"}], "max_tokens": 6}


def test_the_sampling_dtype_is_bf16_only_for_a_full_fine_tune_under_bf16():
    from synth_ai.backend.trainers.rl.engine_choice import sampling_dtype

    assert sampling_dtype("full", True) == torch.bfloat16  # CUDA with bf16: half the bytes per decoding step
    assert sampling_dtype("lora", True) is None  # its base is bf16 already
    assert sampling_dtype("full", False) is None  # the CPU samples from the trainer's fp32 weights


def _same_weights(served, trainer, dtype) -> bool:
    trained = dict(trainer.named_parameters())
    return all(torch.equal(p, trained[name].detach().to(dtype)) for name, p in served.named_parameters())


def test_a_bf16_sampling_copy_is_refreshed_by_every_publish_with_its_version(tiny_text_models):
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine
    from synth_ai.backend.ml import loading

    path = tiny_text_models[0]
    loading.configure_threads(tiny=True)
    trainer = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    loaded = describe_model("policy", Path(path), trainer, loading.load_tokenizer(path), vision=False)
    engine = BuiltinRolloutEngine(loaded, seed=3, share_weights=True, sampling_dtype=torch.bfloat16,
                                  cid_prefix="job-")
    served = engine.served.model
    assert not engine.share_weights and served is not trainer
    assert {p.dtype for p in served.parameters()} == {torch.bfloat16}
    assert not any(p.requires_grad for p in served.parameters())
    assert not {p.data_ptr() for p in served.parameters()} & {p.data_ptr() for p in trainer.parameters()}
    assert _same_weights(served, trainer, torch.bfloat16)
    url = engine.start()
    try:
        def versions(cid: str) -> list[int]:
            httpx.post(f"{url}?cid={cid}", json=BODY, timeout=60).raise_for_status()
            sample = engine.take_calls(cid)[0].samples[0]
            assert sample.completion_ids and len(sample.versions) == len(sample.completion_ids)
            return sorted(set(sample.versions))

        assert versions("job-a") == [0]
        with torch.no_grad():  # an optimiser step of the trainer
            for param in trainer.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        assert not _same_weights(served, trainer, torch.bfloat16)  # the copy waits for the publish
        assert versions("job-b") == [0]

        engine.publish(1)
        assert engine.version == 1 and engine.served.policy_version == 1
        assert _same_weights(served, trainer, torch.bfloat16) and engine.served.model is served  # refreshed in place
        assert {p.dtype for p in served.parameters()} == {torch.bfloat16}
        assert versions("job-c") == [1]

        with torch.no_grad():
            for param in trainer.parameters():
                param.mul_(0.5)
        engine.publish(2)
        assert _same_weights(served, trainer, torch.bfloat16) and versions("job-d") == [2]
    finally:
        engine.close()


def test_without_a_sampling_dtype_the_engine_keeps_sharing_the_trainers_weights(tiny_text_models):
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine
    from synth_ai.backend.ml import loading

    path = tiny_text_models[0]
    trainer = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    loaded = describe_model("policy", Path(path), trainer, loading.load_tokenizer(path), vision=False)
    assert BuiltinRolloutEngine(loaded, share_weights=True).served.model is trainer
    assert BuiltinRolloutEngine(loaded, share_weights=True, sampling_dtype=torch.float32).served.model is trainer
    copied = BuiltinRolloutEngine(loaded, share_weights=False).served.model
    assert copied is not trainer and {p.dtype for p in copied.parameters()} == {torch.float32}
