"""The config models as a job body is checked against them: by the backend when a job is created, and by the trainer
when it reads its settings.

Every key is optional here, and every key that is present is held to its type and bounds in the config model. So a
key's rule is written once, in `synth_ai.config`, and `synth-ai config validate`, the backend's 400 answers and the
trainer enforce the same one. Only required-ness differs: `config validate` asks for the keys a product config must
have, while a backend also takes bodies from other clients (curl, the 0.2.17 client) that leave out keys the trainer
has defaults for.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, create_model

from synth_ai.config.diagnostics import KeyPath, error_words, input_location
from synth_ai.config.toml_source import format_key_path
from synth_ai.errors import InvalidInputError

KeyNamer = Callable[[KeyPath], str]


class ConfigKeyError(InvalidInputError):
    """A value that its config type refuses; `path` is the key path inside the part that was checked."""

    def __init__(self, message: str, *, path: KeyPath, found: Any) -> None:
        super().__init__(message)
        self.path = path
        self.found = found


def toml_key(path: KeyPath) -> str:
    """How the trainer and the backend name a key of a TOML config: `[training].batch_size`."""
    return format_key_path(path)


def dotted_key(prefix: str) -> KeyNamer:
    """Keys under a JSON field of the body: `hyperparameters.n_epochs`."""
    return lambda path: ".".join([prefix, *(str(p) for p in path)])


@functools.cache
def lenient(model: type[BaseModel]) -> type[BaseModel]:
    """`model` with every field optional (default None), nested sections included; types and bounds unchanged."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = _lenient_annotation(info.rebuild_annotation())
        fields[name] = (typing.Optional[annotation], Field(default=None, alias=info.alias))  # noqa: UP007
    return create_model(f"Lenient{model.__name__}", __config__=model.model_config, __doc__=model.__doc__,
                        **fields)


def _lenient_annotation(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return lenient(annotation)
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *extras = typing.get_args(annotation)
        return Annotated[(_lenient_annotation(base), *extras)]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_lenient_annotation(a) for a in typing.get_args(annotation))]  # noqa: UP007
    return annotation


def check_part(model: type[BaseModel], data: Any, name: KeyNamer = toml_key) -> Any:
    """`data` validated by the lenient form of `model` (a missing part is an empty one); the first refused value
    raises ConfigKeyError saying `<key> must be <what the config type expects> (found <value>)`."""
    try:
        return lenient(model).model_validate({} if data is None else data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path, _ = input_location(data, tuple(err["loc"]), False)
        words, key = error_words(err), name(path) or "the config"
        said = f"{key} must be {words.removeprefix('expected ')}" if words.startswith("expected ") else \
            f"{key}: {words}"
        raise ConfigKeyError(f"{said} (found {err.get('input')!r}).", path=path, found=err.get("input")) from None


def given(part: BaseModel) -> dict[str, Any]:
    """The keys a validated part was given (unknown ones included), with the values their types made of them."""
    return part.model_dump(mode="python", exclude_unset=True, by_alias=True)
