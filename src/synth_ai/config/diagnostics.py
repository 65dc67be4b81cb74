"""Turning validation failures into located, actionable issues, and collecting them.

Three sources of issues feed one `Findings` list per file: pydantic's type errors (all of them, not only the
first), cross-field rules written in each schema module, and unknown keys (with the known key each looks like).
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from synth_ai.config.toml_source import TomlSource, format_key_path
from synth_ai.errors import ConfigError, ConfigIssue

KeyPath = tuple[str | int, ...]

_TYPE_WORDS = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list (TOML array)",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "datetime_type": "expected a date/time",
    "datetime_parsing": "expected a date/time",
    "date_type": "expected a date",
    "date_parsing": "expected a date",
}


@dataclass
class Findings:
    """Issues gathered for one config file."""

    source: TomlSource
    issues: list[ConfigIssue] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.issues[:0] = self.source.repairs  # lenient reads of the file come first, as warnings

    def error(self, path: KeyPath, message: str, *, fix: str | None = None, found: Any = None,
              has_found: bool = False) -> None:
        self.issues.append(self.source.issue(path, message, fix=fix, found=found, has_found=has_found))

    def error_found(self, path: KeyPath, message: str, found: Any, *, fix: str | None = None) -> None:
        self.error(path, message, fix=fix, found=found, has_found=True)

    def warn(self, path: KeyPath, message: str, *, fix: str | None = None) -> None:
        self.issues.append(self.source.issue(path, message, fix=fix, severity="warning"))

    def note(self, path: KeyPath, message: str) -> None:
        self.issues.append(self.source.issue(path, message, severity="note"))

    @property
    def errors(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def notes(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == "note"]

    def raise_if_errors(self, hint: str | None = None) -> None:
        if self.errors:
            raise ConfigError(self.issues, file=self.source.display,
                              hint=hint or "Fix the keys listed above; `synth-ai config schema <kind>` shows every "
                              "key and its type.")


def add_validation_errors(findings: Findings, exc: ValidationError, root: KeyPath = (), data: Any = None,
                          model: type[BaseModel] | None = None) -> None:
    """Record every pydantic error as an issue at its TOML key path.

    For a value that fits none of a union's types pydantic reports one error per member, with the member's name
    ('str', 'dict[str,any]', ...) appended to the location. Those become one issue at the key itself.
    """
    union_failures: dict[KeyPath, tuple[list[str], Any, str]] = {}
    for err in exc.errors(include_url=False):
        loc, is_union_member = input_location(data, tuple(err["loc"]), err["type"] == "missing")
        path: KeyPath = root + loc
        kind = err["type"]
        if kind == "missing" and not is_union_member:
            leaf = path[-1] if path else "value"
            if model is not None and _is_table_field(model, loc):
                name = ".".join(str(p) for p in path)
                findings.error(path, "required table is missing", fix=f"add a [{name}] table")
                continue
            table = format_key_path(path[:-1]) if len(path) > 1 else "the top level"
            findings.error(path, "required key is missing",
                           fix=f"add `{leaf} = ...` under {table}")
            continue
        message = error_words(err)
        if is_union_member:
            words, _, _ = union_failures.setdefault(path, ([], err.get("input"), kind))
            if message not in words:
                words.append(message)
            continue
        findings.error_found(path, message, err.get("input"), fix=_fix_for(kind, path))
    for path, (words, found, kind) in union_failures.items():
        if len(words) == 1:
            message = words[0]
        else:
            kinds = [w.removeprefix("expected ") for w in words]
            message = "expected " + ", ".join(kinds[:-1]) + " or " + kinds[-1]
        findings.error_found(path, message, found, fix=_fix_for(kind, path) if len(words) == 1 else None)


def error_words(err: Any) -> str:
    """One pydantic error (an item of `ValidationError.errors()`) in the words a config issue uses."""
    if err["type"] == "literal_error":
        return "expected " + err["msg"].removeprefix("Input should be ")
    return _TYPE_WORDS.get(err["type"]) or err["msg"]


def input_location(data: Any, loc: KeyPath, missing: bool) -> tuple[KeyPath, bool]:
    """The part of a pydantic error location that names keys of the input, and whether anything was cut off
    (a union member's name). Without the input, the location is taken as it is."""
    if data is None:
        return loc, False
    node, path = data, []
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and not isinstance(part, bool) \
                and 0 <= part < len(node):
            node = node[part]
        elif missing and index == len(loc) - 1 and isinstance(node, dict):
            path.append(part)  # the absent key a "missing" error is about
            return tuple(path), False
        else:
            return tuple(path), True
        path.append(part)
    return tuple(path), False


def _fix_for(kind: str, path: KeyPath) -> str | None:
    key = format_key_path(path)
    if kind in {"dict_type", "model_type", "model_attributes_type"}:
        return f"write {key} as a table ([{'.'.join(str(p) for p in path)}] with keys under it)"
    if kind == "list_type":
        return f"write {key} as an array, e.g. [\"a\", \"b\"]"
    return None


def validate_section(findings: Findings, model: type[BaseModel], data: Any, root: KeyPath = ()) -> BaseModel | None:
    """Validate `data` with `model`, recording errors, unknown keys among them."""
    if isinstance(data, dict):
        check_unknown_keys(findings, model, data, root)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        add_validation_errors(findings, exc, root, data, model)
        return None


def checked_data(validated: BaseModel | None, raw: dict[str, Any]) -> dict[str, Any]:
    """What the cross-field rules read: the validated values when the schema pass succeeded, so that a number or
    boolean written as a string (`gpu_count = "2"`, `enable = "false"`) is checked as the value it becomes; the
    raw table otherwise (the file is rejected then anyway, the rules only add their findings)."""
    if validated is None:
        return raw
    return validated.model_dump(mode="python", exclude_none=True, by_alias=True)


def check_unknown_keys(findings: Findings, model: type[BaseModel], data: dict[str, Any], root: KeyPath) -> None:
    """Every key of a table the schema defines must be one of its keys, at any depth: a misspelt key would
    otherwise be ignored while its intended setting keeps its default (`max_stalenes = 2` trained synchronously).
    Tables the schema leaves open (`env_config`, `tags`, `rewards`, ...) are the task app's or the user's; a model
    with `takes_other_keys` refuses only keys that look like its own."""
    known = _field_names(model)
    for key, value in data.items():
        if key in known:
            nested = _nested_model(model, key)
            if nested is not None and isinstance(value, dict):
                check_unknown_keys(findings, nested, value, root + (key,))
            elif nested is not None and isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, dict):
                        check_unknown_keys(findings, nested, item, root + (key, index))
            continue
        names = sorted({info.alias or name for name, info in model.model_fields.items()})
        open_table = getattr(model, "takes_other_keys", False)  # such a table's other keys are the task app's
        guess = difflib.get_close_matches(key, names, n=1, cutoff=0.75 if open_table else 0.6)
        if guess:
            findings.error(root + (key,), f"unknown key; did you mean `{guess[0]}`?",
                           fix=f"rename `{key}` to `{guess[0]}`")
        elif not open_table:
            findings.error(root + (key,), "unknown key", fix=_known_keys_fix(names, root))


def _known_keys_fix(names: list[str], root: KeyPath) -> str:
    """What to do about a key like no known one: remove it, seeing the keys its table takes."""
    where = f"[{'.'.join(str(p) for p in root)}]" if root else "the top level"
    if len(names) <= 12:
        return f"remove it; {where} takes: {', '.join(names)}"
    return f"remove it; `synth-ai config schema` lists the keys {where} takes"


def _is_table_field(model: type[BaseModel], loc: KeyPath) -> bool:
    """Whether the field at `loc` (keys within `model`) holds a table rather than a value."""
    current: type[BaseModel] | None = model
    for index, key in enumerate(loc):
        if current is None or not isinstance(key, str):
            return False
        if index == len(loc) - 1:
            for name, info in current.model_fields.items():
                if key in {name, info.alias}:
                    return _model_in(info.annotation) is not None
            return False
        current = _nested_model(current, key)
    return False


def _field_names(model: type[BaseModel]) -> set[str]:
    names = set()
    for name, info in model.model_fields.items():
        names.add(info.alias or name)
        names.add(name)
    return names


def _nested_model(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    for name, info in model.model_fields.items():
        if key in {name, info.alias}:
            return _model_in(info.annotation)
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
