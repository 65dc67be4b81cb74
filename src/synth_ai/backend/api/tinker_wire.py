"""The Tinker SDK's protobuf bodies, read and written for the API process (numpy, no torch).

The SDK (`tinker` 0.38.0, the `tinker` extra) sends `forward_backward` as a protobuf `ForwardBackwardRequest` and
reads the results of `forward_backward` and `sample` only as protobuf (`ForwardBackwardOutput`, `SampleResponse`).
The message classes are the SDK's own (`tinker.proto.tinker_public_pb2`); this module turns them into the plain
JSON the worker takes and gives (lists of numbers), so the request queue and the worker never see protobuf.
"""

from __future__ import annotations

import math
from typing import Any

from synth_ai.env.extras import install_commands
from synth_ai.errors import InvalidInputError

_NUMPY_DTYPES = {1: "<f4", 2: "<i8", 3: "<i4"}  # DTYPE_FLOAT32, DTYPE_INT64, DTYPE_INT32
_BFLOAT16 = 4


def proto() -> Any:
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as exc:
        raise InvalidInputError("This backend cannot read the Tinker SDK's protobuf bodies: the `tinker` package "
                                "is not installed where the backend runs.",
                                hint="Install the tinker extra where the backend runs, then restart it:\n"
                                     + install_commands("tinker", "synth-ai backend serve")) from exc
    return tinker_public_pb2


def read_forward_backward(body: bytes) -> dict[str, Any]:
    """A `ForwardBackwardRequest` as JSON: tokens and loss inputs as flat lists with their shapes."""
    import numpy as np
    from google.protobuf.message import DecodeError

    pb = proto()
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise InvalidInputError(f"The forward_backward body is not a ForwardBackwardRequest ({exc}).") from None
    config: dict[str, Any] = {key: value for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = []
    for index, datum in enumerate(message.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise InvalidInputError(f"data[{index}].model_input has a {kind} chunk; this backend trains on "
                                        "token chunks only (no images or audio yet).")
            tokens.extend(int(t) for t in np.frombuffer(chunk.encoded_text.tokens, dtype="<i4"))
        inputs = {name: _tensor(tensor, f"data[{index}].loss_fn_inputs.{name}")
                  for name, tensor in datum.loss_fn_inputs.items()}
        data.append({"tokens": tokens, "inputs": inputs})
    return {"model_id": message.model_id, "seq_id": int(message.seq_id), "loss_fn": message.loss_fn,
            "loss_fn_config": config, "forward_only": bool(message.forward_only), "data": data}


def _tensor(tensor: Any, where: str) -> dict[str, Any]:
    import numpy as np

    shape = [int(n) for n in tensor.shape]
    if tensor.WhichOneof("encoding") == "sparse_csr":
        csr = tensor.sparse_csr
        values = _array(csr.values, tensor.dtype, where)
        rows = np.frombuffer(csr.crow_indices, dtype="<i8")
        cols = np.frombuffer(csr.col_indices, dtype="<i8")
        dense = np.zeros(shape, dtype=values.dtype)
        for row in range(len(rows) - 1):
            dense[row, cols[rows[row]:rows[row + 1]]] = values[rows[row]:rows[row + 1]]
        flat = dense.reshape(-1)
    else:
        flat = _array(tensor.dense, tensor.dtype, where)
    if shape and math.prod(shape) != flat.size:
        raise InvalidInputError(f"{where} says shape {shape} but holds {flat.size} values.")
    return {"values": flat.tolist(), "shape": shape or [int(flat.size)]}


def _array(raw: bytes, dtype: int, where: str) -> Any:
    import numpy as np

    if dtype == _BFLOAT16:
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    if dtype not in _NUMPY_DTYPES:
        raise InvalidInputError(f"{where} has an unknown dtype ({dtype}).")
    return np.frombuffer(raw, dtype=_NUMPY_DTYPES[dtype])


def forward_backward_output(result: dict[str, Any]) -> bytes:
    """The worker's `{"outputs": [{field: [floats]}...], "metrics": {"name:reduction": x}}` as protobuf."""
    import numpy as np

    pb = proto()
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    outputs = result.get("outputs") or []
    record = out.loss_fn_outputs.add(num_datums=len(outputs))
    for name in (outputs[0] if outputs else {}):
        arrays = [np.asarray(datum[name], dtype="<f4") for datum in outputs]
        offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype("<i8")
        record.fields[name].CopyFrom(pb.BatchedTensor(data=b"".join(a.tobytes() for a in arrays),
                                                      offsets=offsets.tobytes(), dtype=pb.DTYPE_FLOAT32,
                                                      trailing_shape=list(arrays[0].shape[1:])))
    for key, value in (result.get("metrics") or {}).items():
        out.metrics[key] = float(value)
    return out.SerializeToString()


def sample_response(result: dict[str, Any]) -> bytes:
    """The worker's `{"sequences": [...], "prompt_logprobs": [...]|None}` as protobuf (None logprobs as NaN)."""
    import numpy as np

    pb = proto()
    out = pb.SampleResponse()
    for sequence in result.get("sequences") or []:
        out.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if sequence["stop_reason"] == "stop" else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(sequence["tokens"], dtype="<i4").tobytes(),
            logprobs=np.asarray(sequence["logprobs"], dtype="<f4").tobytes())
    prompt = result.get("prompt_logprobs")
    if prompt is not None:
        out.prompt_logprobs = np.asarray([math.nan if v is None else v for v in prompt], dtype="<f4").tobytes()
    return out.SerializeToString()
