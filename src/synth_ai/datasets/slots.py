"""`Fields`: repr and == over `__slots__`, what a dataclass gives, for the datasets package's small result types.

They are plain classes rather than dataclasses because this package is loaded by every `synth-ai files validate`
start, and `dataclasses` (through `inspect`) costs more to import than validating a small file.
"""

from __future__ import annotations


class Fields:
    __slots__ = ()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as dataclasses are by default

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}
