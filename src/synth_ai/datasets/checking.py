"""What every record rule shares: the options a record is checked against, the result the rules fill in, the
context passed between them, and how a found value is named in a message."""

from __future__ import annotations


from synth_ai.datasets.record_types import RecordOptions, RecordResult

TYPE_CHECKING = False  # `typing` is not loaded at run time (the `files validate` start-up: see record_types)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RecordOptions", "RecordResult", "RuleContext", "show_value", "type_name"]


class RuleContext:
    """One record being checked: its options, the result being filled in, and whether to normalise."""

    __slots__ = ("opts", "res", "normalize")

    def __init__(self, opts: RecordOptions) -> None:
        self.opts = opts
        self.res = RecordResult()
        self.normalize = opts.normalize

    def error(self, text: str) -> None:
        self.res.errors.append(text)


def type_name(value: Any) -> str:
    """The JSON name of a value's type, as error messages say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def show_value(value: Any) -> str:
    """A short JSON rendering of a scalar (its type name otherwise), for quoting a wrong value."""
    if isinstance(value, (str, int, float, bool)):
        import json  # only for a message: a clean file's check never loads json (see lean_json)

        text = json.dumps(value)
    else:
        text = type_name(value)
    return text if len(text) <= 40 else text[:37] + "..."
