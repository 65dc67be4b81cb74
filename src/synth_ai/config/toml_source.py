"""Reading a TOML config: syntax errors with line and column, and key paths mapped back to lines.

`tomllib` reports where a syntax error is but, for valid files, forgets where each key was written. The
`KeyLocator` recovers that from the text with a light scan of table headers and `key =` lines, so validation
errors can say `sft.toml:12`. It is best effort: keys inside inline tables point at their table's line.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 is not supported by pyproject, kept for clarity
    import tomli as tomllib

from synth_ai.errors import ConfigError, ConfigIssue, InvalidInputError, NotFoundError

_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def _split_dotted(key: str) -> tuple[str, ...]:
    parts = []
    for raw in re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", key):
        parts.append(raw[1:-1] if raw[0] in "\"'" else raw)
    return tuple(parts)


def _follow_value(text: str, depth: int, quote: str | None) -> tuple[int, str | None]:
    """Follow a value across lines: after `text`, how deep inside arrays it is and which multi-line string
    (\"\"\" or ''') is still open."""
    i, n = 0, len(text)
    while i < n:
        if quote is not None:
            end = text.find(quote, i)
            if end < 0:
                return depth, quote
            i, quote = end + 3, None
        elif text.startswith(('"""', "'''"), i):
            quote, i = text[i:i + 3], i + 3
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[i] == '"' and text[j] == "\\" else 1
            i = j + 1
        elif text[i] == "#":
            break
        else:
            depth = max(depth + (text[i] == "[") - (text[i] == "]"), 0)
            i += 1
    return depth, quote


@dataclass
class KeyLocator:
    """Maps key paths (tuples of keys) to the 1-based line where they are defined."""

    lines: dict[tuple[str, ...], int] = field(default_factory=dict)

    @classmethod
    def scan(cls, text: str) -> KeyLocator:
        locator = cls()
        table: tuple[str, ...] = ()
        depth, quote = 0, None  # a value still open from an earlier line: array depth, multi-line string quote
        for number, line in enumerate(text.splitlines(), start=1):
            if depth or quote:  # inside a multi-line array or string: no headers or keys here
                depth, quote = _follow_value(line, depth, quote)
                continue
            header = _HEADER.match(line)
            if header and not _ASSIGN.match(line):
                table = _split_dotted(header.group(1))
                locator.lines.setdefault(table, number)
                continue
            assign = _ASSIGN.match(line)
            if assign:
                path = table + _split_dotted(assign.group(1))
                locator.lines.setdefault(path, number)
                depth, quote = _follow_value(line[assign.end():], 0, None)
        return locator

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        keys = tuple(p for p in path if isinstance(p, str))
        while keys:
            if keys in self.lines:
                return self.lines[keys]
            keys = keys[:-1]
        return None


@dataclass
class TomlSource:
    """A parsed TOML file with the means to locate its keys."""

    path: Path
    data: dict[str, Any]
    locator: KeyLocator
    repairs: list[ConfigIssue] = field(default_factory=list)  # warnings about syntax read leniently

    @property
    def display(self) -> str:
        return display_path(self.path)

    def issue(self, path: tuple[str | int, ...], message: str, *, fix: str | None = None,
              found: Any = None, has_found: bool = False, severity: str = "error") -> ConfigIssue:
        return ConfigIssue(message=message, file=self.display, key=format_key_path(path) if path else None,
                           line=self.locator.line_of(path) if path else None, found=found,
                           has_found=has_found, fix=fix, severity=severity)


def display_path(path: Path) -> str:
    """The path as the user would recognise it: relative to the working directory when inside it."""
    for shown, cwd in ((path.absolute(), Path.cwd().absolute()), (path.resolve(), Path.cwd().resolve())):
        try:  # unresolved first, so a symlinked config keeps the name it was given
            return str(shown.relative_to(cwd))
        except ValueError:
            continue
    return str(path)


def format_key_path(path: tuple[str | int, ...]) -> str:
    """('training', 'weight_sync', 'mode') -> '[training.weight_sync].mode'; ('evaluation', 'seeds', 2) ->
    '[evaluation].seeds[2]'; ('training',) -> '[training]'; a top-level scalar key stays bare."""

    def join(parts: tuple[str | int, ...]) -> str:
        text = ""
        for part in parts:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text

    leaf = max((i for i, p in enumerate(path) if isinstance(p, str)), default=-1)
    if leaf < 0:
        return join(path)
    indices = join(path[leaf + 1:]) if leaf + 1 < len(path) else ""
    if leaf == 0:
        name = str(path[0])
        return (f"[{name}]" if _is_table_name(name) and not indices else name) + indices
    return f"[{join(path[:leaf])}].{path[leaf]}{indices}"


def _is_table_name(name: str) -> bool:
    return name in _SECTION_NAMES


# Names that are tables in some config kind, so a bare one renders as `[name]` rather than a top-level key.
_SECTION_NAMES = {
    "algorithm", "services", "compute", "topology", "vllm", "reference", "model", "policy", "lora", "rollout",
    "evaluation", "training", "rubric", "judge", "tags", "job", "data", "hyperparameters", "model_config", "eval",
    "filter",
}


def load_toml(path: str | Path) -> TomlSource:
    """Parse a TOML file; a syntax error becomes a ConfigError with line and column, never an empty config."""
    file = Path(path).expanduser()
    if not file.exists():
        raise NotFoundError(f"Config not found: {file.resolve()}", hint="Check the path, or pass --config PATH.")
    if not file.is_file():
        raise InvalidInputError(f"Config path is not a file: {file.resolve()}", hint="Pass the path of a .toml file.")
    try:
        raw = file.read_bytes()
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{display_path(file)}: not valid UTF-8 text ({exc.reason} at byte {exc.start}).",
                                hint="Save the config as UTF-8.") from None
    except OSError as exc:
        raise InvalidInputError(f"{display_path(file)}: cannot read the file ({exc.strerror}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        lenient = _read_json_style_tables(file, text)
        if lenient is not None:
            return lenient
        message = str(exc)
        match = _POSITION.search(message)
        line = getattr(exc, "lineno", None) or (int(match.group(1)) if match else None)
        column = getattr(exc, "colno", None) or (int(match.group(2)) if match else None)
        reason = _POSITION.sub("", getattr(exc, "msg", message)).strip()
        if line is None and "at end of document" in message:  # tomllib gives no numbers for the end of the text
            line, column = text.count("\n") + 1, len(text) - text.rfind("\n")
        issue = ConfigIssue(message=f"TOML syntax error: {reason}", file=display_path(file), line=line,
                            column=column, fix=_syntax_fix(text, line))
        raise ConfigError([issue], file=display_path(file),
                          hint="Fix the TOML syntax at the line shown; nothing was submitted.") from None
    return TomlSource(path=file, data=data, locator=KeyLocator.scan(text))


def _read_json_style_tables(file: Path, text: str) -> TomlSource | None:
    """The file read with `{ "key": value }` inline tables taken as `{ "key" = value }` (see toml_repair), or
    None when that is not what kept it from parsing."""
    from synth_ai.config.toml_repair import colons_as_equals

    repaired, lines = colons_as_equals(text)
    if not lines:
        return None
    try:
        data = tomllib.loads(repaired)
    except tomllib.TOMLDecodeError:
        return None
    original = text.splitlines()
    repairs = [ConfigIssue(message="inline table written with ':' (JSON style), which is not TOML; read as '='",
                           file=display_path(file), line=number, found=original[number - 1].strip(), has_found=True,
                           fix=f"write {repaired.splitlines()[number - 1].strip()!r} so other TOML tools read it too",
                           severity="warning")
               for number in lines]
    return TomlSource(path=file, data=data, locator=KeyLocator.scan(repaired), repairs=repairs)


def _syntax_fix(text: str, line: int | None) -> str | None:
    if line is None:
        return None
    lines = text.splitlines()
    if 1 <= line <= len(lines):
        return f"check line {line}: {lines[line - 1].strip()[:100]!r}"
    last = next((n for n in range(len(lines), 0, -1) if lines[n - 1].strip()), None)
    if last is not None:  # the file ended inside a key, value or table header
        return f"the file ends before this is complete; check line {last}: {lines[last - 1].strip()[:100]!r}"
    return None
