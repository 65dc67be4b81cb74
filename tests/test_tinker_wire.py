"""The Tinker SDK's protobuf bodies as the backend reads and writes them (`api/tinker_wire.py`), checked against the
SDK's own encoder and decoders (`tinker.proto.request_conv`, `response_conv`): what the SDK sends reads back as
sent, and what the backend answers decodes in the SDK as meant."""

from __future__ import annotations

import math

import pytest

from synth_ai.backend.api import tinker_wire
from synth_ai.errors import InvalidInputError


def _sdk_request(data, loss_fn="importance_sampling", config=None):
    from tinker import types
    from tinker.proto.request_conv import forward_backward_request_to_proto

    request = types.ForwardBackwardRequest(
        model_id="sess-1:train:0", seq_id=7,
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config))
    return forward_backward_request_to_proto(request).SerializeToString()


def test_a_forward_backward_request_reads_back_as_the_sdk_sent_it():
    from tinker import types

    datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]),
                        loss_fn_inputs={"target_tokens": [6, 7, 8], "logprobs": [-0.5, -1.25, -2.0],
                                        "advantages": [1.0, -1.0, 0.5]})
    read = tinker_wire.read_forward_backward(_sdk_request([datum, datum], config={"clip_low_threshold": 0.7}))
    assert read["model_id"] == "sess-1:train:0" and read["seq_id"] == 7 and read["loss_fn"] == "importance_sampling"
    assert read["loss_fn_config"] == {"clip_low_threshold": pytest.approx(0.7)} and not read["forward_only"]
    assert len(read["data"]) == 2
    first = read["data"][0]
    assert first["tokens"] == [5, 6, 7]
    assert first["inputs"]["target_tokens"] == {"values": [6, 7, 8], "shape": [3]}
    assert first["inputs"]["logprobs"]["values"] == [-0.5, -1.25, -2.0]
    assert first["inputs"]["advantages"]["values"] == [1.0, -1.0, 0.5]


def test_a_body_that_is_not_the_sdks_message_is_refused():
    with pytest.raises(InvalidInputError, match="not a ForwardBackwardRequest"):
        tinker_wire.read_forward_backward(b"\xff\xff\xff not protobuf")


def test_results_decode_in_the_sdk_as_meant():
    from tinker.proto.response_conv import deserialize_forward_backward_output, deserialize_sample_response

    output = deserialize_forward_backward_output(tinker_wire.forward_backward_output(
        {"outputs": [{"logprobs": [-1.0, -2.0], "elementwise_loss": [1.0, 2.0]},
                     {"logprobs": [-0.5], "elementwise_loss": [0.5]}], "metrics": {"loss:sum": 3.5}}))
    assert output.metrics == {"loss:sum": 3.5}
    assert [o["logprobs"].tolist() for o in output.loss_fn_outputs] == [[-1.0, -2.0], [-0.5]]
    assert output.loss_fn_outputs[1]["elementwise_loss"].tolist() == [0.5]

    sample = deserialize_sample_response(tinker_wire.sample_response(
        {"sequences": [{"tokens": [4, 9], "logprobs": [-0.25, -3.0], "stop_reason": "stop"},
                       {"tokens": [4, 1, 2], "logprobs": [-0.25, -1.0, -1.5], "stop_reason": "length"}],
         "prompt_logprobs": [None, -1.5, -0.75]}))
    assert [s.tokens for s in sample.sequences] == [[4, 9], [4, 1, 2]]
    assert [s.stop_reason for s in sample.sequences] == ["stop", "length"]
    assert sample.sequences[1].logprobs == pytest.approx([-0.25, -1.0, -1.5])
    assert sample.prompt_logprobs[0] is None or math.isnan(sample.prompt_logprobs[0])
    assert sample.prompt_logprobs[1:] == pytest.approx([-1.5, -0.75])
