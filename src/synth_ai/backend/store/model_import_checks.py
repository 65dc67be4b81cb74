"""What a folder must hold before it is imported (`model_import`): its JSON files parse, the adapter's LoRA
settings have the types PEFT needs, and every weights file opens. A folder that would be accepted and then fail
every job or chat (a `r = "eight"`, random bytes as weights) is refused here, naming the file and the field.

Weights are checked without torch: a safetensors file is an 8-byte little-endian header length, a JSON header
(tensor name -> dtype, shape, data offsets) and the data; the header must parse and its offsets fit the file. A
PyTorch `.bin` file must be the zip archive `torch.save` writes."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

from synth_ai.errors import InvalidInputError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit


def checked_adapter_config(folder: Path) -> dict[str, Any]:
    """The adapter's parsed `adapter_config.json`, once its fields and weights are checked."""
    path = folder / ADAPTER_CONFIG
    config = read_json_object(path)
    _check_field(path, config, "r", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                 "a positive whole number (the LoRA rank)", required=True)
    _check_field(path, config, "lora_alpha", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                 and v > 0, "a positive number")
    _check_field(path, config, "target_modules", lambda v: isinstance(v, str) or (
        isinstance(v, list) and bool(v) and all(isinstance(m, str) for m in v)), "a module name or a list of them")
    _check_field(path, config, "peft_type", lambda v: isinstance(v, str) and v.upper() == "LORA", '"LORA"')
    _check_field(path, config, "base_model_name_or_path", lambda v: v is None or isinstance(v, str), "a string")
    weights = [folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()]
    if not weights:
        raise InvalidInputError(f"{folder} has {ADAPTER_CONFIG} but no adapter weights "
                                f"({' or '.join(ADAPTER_WEIGHTS)}).", hint="Import the whole folder `save_pretrained` "
                                "wrote.")
    for weights_file in weights:
        check_weights_file(weights_file)
    return config


def check_full_model(folder: Path) -> None:
    """A full Hugging Face folder: `config.json` is a JSON object and every `.safetensors` file opens."""
    read_json_object(folder / "config.json")
    for weights_file in sorted(folder.glob("*.safetensors")):
        check_weights_file(weights_file)


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                                hint="Restore the file `save_pretrained` wrote.",
                                details={"file": str(path), "line": exc.lineno}) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path} cannot be read ({exc}).", details={"file": str(path)}) from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} must hold a JSON object, found {type(data).__name__}.",
                                details={"file": str(path)})
    return data


def check_weights_file(path: Path) -> None:
    if path.suffix == ".bin":
        if not zipfile.is_zipfile(path):
            _bad_weights(path, "not a PyTorch archive (torch.save's zip format)")
        return
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            _bad_weights(path, f"{size} bytes, shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            _bad_weights(path, "its header length does not fit the file")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            _bad_weights(path, "its header is not JSON")
    if not isinstance(header, dict):
        _bad_weights(path, "its header is not a JSON object")
    data_size = size - 8 - length
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1] <= data_size):
            _bad_weights(path, f"tensor {name!r} lies outside the file")


def _check_field(path: Path, config: dict[str, Any], key: str, ok, expected: str, *, required: bool = False) -> None:
    if key not in config:
        if required:
            raise InvalidInputError(f"{path}: {key} is missing; expected {expected}.",
                                    hint="Restore the file `save_pretrained` wrote.",
                                    details={"file": str(path), "field": key})
        return
    if not ok(config[key]):
        raise InvalidInputError(f"{path}: {key} is {config[key]!r}; expected {expected}.",
                                hint=f"Fix {key} in {path.name} (it is what PEFT wrote when the adapter was saved).",
                                details={"file": str(path), "field": key})


def _bad_weights(path: Path, why: str) -> None:
    raise InvalidInputError(f"{path} is not a readable weights file: {why}.",
                            hint="Import the folder `save_pretrained` wrote; the weights file may be truncated or "
                                 "replaced.", details={"file": str(path)})
