"""Field types shared by every config schema, with messages written for people editing TOML.

TOML has real integers and booleans, so the usual pydantic coercions are too lenient in one place: `true` must
never pass as the integer 1. Numeric strings are still accepted where synth-ai 0.2.17 accepted them.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

# Every section keeps unknown keys and forwards them, as the reference does (typos are warned about separately).
SECTION = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())


def _number(value: Any, *, kind: str) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("config_type", "expected {kind}, not a boolean", {"kind": kind})
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text) if kind.endswith("integer") else float(text)
        except ValueError:
            raise PydanticCustomError("config_type", "expected {kind}", {"kind": kind}) from None
    return value


def _positive_int(value: Any) -> Any:
    value = _number(value, kind="a positive integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise PydanticCustomError("config_type", "expected a positive integer")
    if value <= 0:
        raise PydanticCustomError("config_range", "expected an integer greater than zero")
    return value


def _non_negative_int(value: Any) -> Any:
    value = _number(value, kind="a non-negative integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise PydanticCustomError("config_type", "expected a non-negative integer")
    if value < 0:
        raise PydanticCustomError("config_range", "expected an integer >= 0")
    return value


def _deepspeed_stage(value: Any) -> Any:
    value = _non_negative_int(value)
    if value > 3:
        raise PydanticCustomError("config_range", "expected 0, 1, 2 or 3")
    return value


def _finite_float(value: Any) -> float:
    value = _number(value, kind="a number")
    if not isinstance(value, (int, float)):
        raise PydanticCustomError("config_type", "expected a number")
    value = float(value)
    if not math.isfinite(value):
        raise PydanticCustomError("config_range", "expected a finite number")
    return value


def _positive_float(value: Any) -> float:
    value = _finite_float(value)
    if value <= 0:
        raise PydanticCustomError("config_range", "expected a number greater than zero")
    return value


def _non_negative_float(value: Any) -> float:
    value = _finite_float(value)
    if value < 0:
        raise PydanticCustomError("config_range", "expected a number >= 0")
    return value


def _ratio(value: Any) -> float:
    value = _finite_float(value)
    if not 0.0 <= value <= 1.0:
        raise PydanticCustomError("config_range", "expected a number between 0 and 1")
    return value


def _non_empty_str(value: Any) -> Any:
    if not isinstance(value, str):
        raise PydanticCustomError("config_type", "expected a string")
    if not value.strip():
        raise PydanticCustomError("config_range", "expected a non-empty string")
    return value


def _flag(value: Any) -> Any:
    """true/false, or those words as strings (what a string-typed TOML value or a JSON body may carry); pydantic's
    own bool would also take "yes", "on" or 1, which reads too much into a typo."""
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise PydanticCustomError("config_type", "expected true or false")
    return value


def _string_list(value: Any) -> Any:
    """A list of strings; a single string (or a comma-separated one) becomes a list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list):
        raise PydanticCustomError("config_type", "expected a list of strings")
    for item in value:
        if not isinstance(item, str):
            raise PydanticCustomError("config_type", "expected a list of strings (found an item that is not)")
    return value


_RANGE = re.compile(r"^\s*(-?\d+)\s*-\s*(-?\d+)\s*$")


def parse_seeds(value: Any) -> list[int]:
    """Seeds as written in configs or on the command line: [0, 1], "0-3", "1,2", ["0-3", 7]."""
    items: list[Any] = value if isinstance(value, list) else [value]
    seeds: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise PydanticCustomError("config_type", "expected integer seeds, not a boolean")
        if isinstance(item, int):
            seeds.append(item)
            continue
        if not isinstance(item, str):
            raise PydanticCustomError("config_type", "expected integer seeds, a range like \"0-3\" or \"1,2\"")
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            match = _RANGE.match(part)
            if match:
                start, end = int(match.group(1)), int(match.group(2))
                if end < start:
                    raise PydanticCustomError("config_range", "seed range '{part}' ends before it starts",
                                              {"part": part})
                seeds.extend(range(start, end + 1))
            elif re.fullmatch(r"-?\d+", part):
                seeds.append(int(part))
            else:
                raise PydanticCustomError("config_type", "cannot read seed '{part}': use integers, \"0-3\" or \"1,2\"",
                                          {"part": part})
    if not seeds:
        raise PydanticCustomError("config_range", "expected at least one seed")
    return seeds


# The constraint comes before the validator so that it lands on the plain type and the JSON Schema shows it
# (`exclusiveMinimum`, `minimum`/`maximum`, `minLength`, `minItems`); after it, pydantic emits a bare `gt`.
PositiveInt = Annotated[int, Field(gt=0), BeforeValidator(_positive_int)]
NonNegativeInt = Annotated[int, Field(ge=0), BeforeValidator(_non_negative_int)]
DeepSpeedStage = Annotated[int, Field(ge=0, le=3), BeforeValidator(_deepspeed_stage)]
FiniteFloat = Annotated[float, BeforeValidator(_finite_float)]
PositiveFloat = Annotated[float, Field(gt=0), BeforeValidator(_positive_float)]
NonNegativeFloat = Annotated[float, Field(ge=0), BeforeValidator(_non_negative_float)]
Ratio = Annotated[float, Field(ge=0, le=1), BeforeValidator(_ratio)]
NonEmptyStr = Annotated[str, Field(min_length=1), BeforeValidator(_non_empty_str)]
Flag = Annotated[bool, BeforeValidator(_flag)]
StringList = Annotated[list[str], BeforeValidator(_string_list)]
Seeds = Annotated[list[int], Field(min_length=1), BeforeValidator(parse_seeds)]
