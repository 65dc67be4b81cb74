"""The typed job specs (`synth_ai.config.job_specs`) read a stored payload where it has always lived: a job stored
by an older backend (and the 0.2.17 wire format) reads the same through the spec as the modules that dug into the
dict read it before; the older flat form (the payload with job_id, model and file paths mixed in) still works."""

from __future__ import annotations

from synth_ai.backend.jobs.kinds import RL_KIND, SFT_KIND, job_kind
from synth_ai.config.job_specs import JobSpec, RLJobSpec, SFTJobSpec

RL_PAYLOAD = {
    "job_type": "rl",
    "compute": {"gpu_type": "H100", "gpu_count": 4},
    "data": {"endpoint_base_url": "http://127.0.0.1:8001/", "base_model": "Qwen/Qwen3-4B",
             "environment_api_key": "sk-env-given",
             "config": {"vllm": {}, "topology": {"gpus_for_vllm": 1}, "training": {"batch_size": 2}}},
}
SFT_PAYLOAD = {
    "model": "synth-ai/tiny-qwen3", "training_file_id": "file_1", "hyperparameters": {"n_epochs": 1},
    "metadata": {"effective_config": {"compute": {"gpu_type": "A100", "gpu_count": 2}}},
}


def test_each_kind_reads_its_stored_payload_with_its_own_spec_type():
    rl = job_kind(RL_KIND).spec_of(RL_PAYLOAD, job_id="rljob_1", model="Qwen/Qwen3-4B")
    sft = job_kind(SFT_KIND).spec_of(SFT_PAYLOAD, job_id="job_1", model="synth-ai/tiny-qwen3",
                                     files={"training": "/blobs/a"})
    assert isinstance(rl, RLJobSpec) and isinstance(sft, SFTJobSpec)
    assert rl.payload is RL_PAYLOAD  # a view: nothing copied or reshaped
    assert rl.task_url == "http://127.0.0.1:8001"
    assert rl.model_id == "Qwen/Qwen3-4B"
    assert rl.compute == {"gpu_type": "H100", "gpu_count": 4}
    assert rl.topology == {"gpus_for_vllm": 1}
    assert rl.vllm == {}  # an empty [vllm] table still asks for vLLM
    assert rl.config["training"] == {"batch_size": 2}
    assert rl.given_environment_keys == ["sk-env-given"]
    assert sft.compute == {"gpu_type": "A100", "gpu_count": 2}
    assert sft.task_url is None and sft.given_environment_keys == []
    assert (sft.training_file_path, sft.validation_file_path) == ("/blobs/a", None)
    assert sft.hyperparameters == {"n_epochs": 1}


def test_rl_compute_falls_back_to_the_configs_compute_table_and_topology_to_compute_topology():
    payload = {"data": {"config": {"compute": {"gpu_count": 2, "topology": {"gpus_for_training": 1}}}}}
    spec = RLJobSpec(payload)
    assert spec.compute == {"gpu_count": 2, "topology": {"gpus_for_training": 1}}
    assert spec.topology == {"gpus_for_training": 1}
    assert spec.vllm is None and spec.task_url is None and spec.model_id is None


def test_the_older_flat_form_is_read_as_a_spec():
    flat = {**SFT_PAYLOAD, "job_id": "job_9", "training_file_path": "/t.jsonl", "validation_file_path": "/v.jsonl"}
    spec = SFTJobSpec.of(flat)
    assert (spec.job_id, spec.model_id) == ("job_9", "synth-ai/tiny-qwen3")
    assert spec.files == {"training": "/t.jsonl", "validation": "/v.jsonl"}
    assert "job_id" not in spec.payload and "training_file_path" not in spec.payload
    assert SFTJobSpec.of(spec) is spec
    assert isinstance(RLJobSpec.of(JobSpec(RL_PAYLOAD, job_id="x")), RLJobSpec)
    assert JobSpec.of({}).job_id == "local"


def test_a_malformed_payload_reads_as_empty_tables_not_an_error():
    spec = RLJobSpec({"data": ["not", "a", "table"], "compute": "x"})
    assert spec.config == {} and spec.compute == {} and spec.topology == {}
    assert SFTJobSpec({"metadata": "x"}).config == {}
