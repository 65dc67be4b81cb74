"""Writing keys into a `.env` file without disturbing anything else in it.

`set_env_values(path, {"KEY": "value"})` replaces the value of every line that sets `KEY`
(`^\\s*(?:export\\s+)?KEY\\s*=`, as synth-ai 0.2.17 matched it) or appends `KEY=value`; every other byte of the file
stays as it was: comments, blank lines, order, `export ` prefixes, inline comments, CRLF line endings. The file is
split with python-dotenv's own parser (the one every reader of the file uses), so a multi-line quoted value is
replaced whole and a line inside someone else's quoted value is never mistaken for an assignment; the new text is
parsed back before it is written, and a value that would not read back exactly is refused.

Writes are atomic. A new file is created 0600; an existing file keeps its mode unless group or others can read it
and it holds secrets, in which case it is tightened to 0600 (and the result says so). Nothing is written when every
value is already there. The returned `FileUpdate` describes what changed, with secret values masked, so callers can
print it: a user's file is never rewritten silently.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.env.secrets import is_secret_name, mask_secret
from synth_ai.errors import InvalidInputError

SECRET_FILE_MODE = 0o600
_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Values made only of these characters are written unquoted (synth-ai 0.2.17 left `[A-Za-z0-9_-./:@+=]` bare).
_BARE_VALUE = re.compile(r"[A-Za-z0-9_./:@+=,%~-]+")
_BOM = "\ufeff"


@dataclass(frozen=True)
class KeyChange:
    key: str
    old: str | None  # None: the file did not set the key
    new: str

    @property
    def action(self) -> str:
        if self.old is None:
            return "added"
        return "unchanged" if self.old == self.new else "updated"

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"key": self.key, "action": self.action, "value": display_value(self.key, self.new)}
        if self.action == "updated":
            doc["previous"] = display_value(self.key, self.old)
        return doc


@dataclass
class FileUpdate:
    """What one write did to one file (secret values masked in every rendering)."""

    path: Path
    changes: list[KeyChange] = field(default_factory=list)
    created: bool = False
    written: bool = False  # the content was rewritten
    mode_before: int | None = None  # None for a new file
    mode_after: int = SECRET_FILE_MODE

    @property
    def tightened(self) -> bool:
        return self.mode_before is not None and self.mode_before != self.mode_after

    @property
    def changed(self) -> bool:
        return self.written or self.tightened

    def lines(self) -> list[str]:
        """Human lines: `Wrote SYNTH_API_KEY=sk_l…ab to ./.env`, `... (unchanged)`, mode changes."""
        where = display_path(self.path)
        out: list[str] = []
        if self.created:
            out.append(f"Created {where} (mode {self.mode_after:04o})")
        for change in self.changes:
            shown = f"{change.key}={display_value(change.key, change.new)}"
            if change.action == "unchanged":
                out.append(f"{shown} already in {where} (unchanged)")
            elif change.action == "updated":
                out.append(f"Wrote {shown} to {where} (replaced {display_value(change.key, change.old)})")
            else:
                out.append(f"Wrote {shown} to {where}")
        if self.tightened:
            out.append(f"Tightened {where} from mode {self.mode_before:04o} to {self.mode_after:04o}: "
                       "it holds secrets and others could read it")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": os.path.abspath(self.path),
            "created": self.created,
            "changed": self.changed,
            "mode": f"{self.mode_after:04o}",
            "mode_before": None if self.mode_before is None else f"{self.mode_before:04o}",
            "keys": [c.to_dict() for c in self.changes],
        }


def display_value(key: str, value: str | None) -> str:
    """A value as it may be printed: masked when the name is a secret's."""
    if value is None:
        return "<unset>"
    return mask_secret(value) if is_secret_name(key) else value


def display_path(path: Path) -> str:
    """`./.env` for files under the working directory, the absolute path otherwise."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    return f"./{relative.as_posix()}"


def render_value(value: str) -> str:
    """The text after `KEY=` that python-dotenv reads back as exactly `value`."""
    if "${" in value:
        # python-dotenv expands ${NAME} in every value, quoted or not, and has no escape for it.
        raise InvalidInputError("A value containing '${' cannot be stored in a .env file: "
                                "python-dotenv would expand it as a variable.",
                                hint="Set this variable in the environment instead of the .env file.")
    if _BARE_VALUE.fullmatch(value):
        return value
    if "'" not in value and "\n" not in value and "\r" not in value and "\\" not in value:
        return f"'{value}'"
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


def file_mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


def secure_mode(mode: int | None, holds_secrets: bool) -> int:
    """The mode a credentials-bearing file should have: new files 0600; existing ones keep theirs unless group or
    others can read a file that holds secrets."""
    if mode is None:
        return SECRET_FILE_MODE
    if holds_secrets and mode & 0o077:
        return SECRET_FILE_MODE
    return mode


def write_file(path: Path, text: str, *, mode: int) -> None:
    """Atomic write (temp file with `mode` from the start, fsync, rename); OS errors become an InvalidInputError."""
    from synth_ai.fsutil import atomic_write_text

    try:
        atomic_write_text(path, text, mode=mode)
    except OSError as exc:
        raise InvalidInputError(f"Cannot write {path}: {exc.strerror or exc}.",
                                hint="Check the folder exists and you may write to it, or choose another file "
                                     "with --env-file.") from None


def chmod_file(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise InvalidInputError(f"Cannot change the permissions of {path}: {exc.strerror or exc}.",
                                hint=f"Run `chmod {mode:o} {path}` yourself.") from None


# Parsing ----------------------------------------------------------------------------------------------------------

def _bindings(text: str):
    from dotenv.parser import parse_stream

    return list(parse_stream(io.StringIO(text)))


def _values(bindings) -> dict[str, str]:
    """Raw (unexpanded) values, the last assignment of a key winning as in python-dotenv."""
    return {b.key: b.value for b in bindings if b.key is not None and b.value is not None}


_ASSIGNMENT = r"\s*(?:export[^\S\r\n]+)?(?:'{key}'|{key})[^\S\r\n]*=[^\S\r\n]*"
_SINGLE = re.compile(r"'(?:\\.|[^'\\])*'", re.DOTALL)
_DOUBLE = re.compile(r'"(?:\\.|[^"\\])*"', re.DOTALL)


def _replace_value(original: str, key: str, rendered: str, newline: str) -> str:
    """`original` (one binding's text, leading blank lines included) with its value replaced by `rendered`."""
    head = re.compile(_ASSIGNMENT.format(key=re.escape(key))).match(original)
    if head is None:  # not expected for a binding the parser read; rewrite it plainly
        lead = original[: len(original) - len(original.lstrip())]
        return f"{lead}{key}={rendered}{newline}"
    start = head.end()
    rest = original[start:]
    if rest[:1] == "'" or rest[:1] == '"':
        quoted = (_SINGLE if rest[0] == "'" else _DOUBLE).match(rest)
        end = start + (quoted.end() if quoted else len(rest.split("\n", 1)[0].rstrip("\r")))
    elif rest[:1] == "#" and head.group(0)[-1:] in (" ", "\t"):
        end = start  # `KEY= # comment`: an empty value followed by a comment
    else:
        line = re.match(r"[^\r\n]*", rest).group(0)
        comment = re.search(r"\s+#.*", line)
        value_text = line[: comment.start()] if comment else line
        end = start + len(value_text.rstrip())
        if comment is not None and not value_text.strip():
            end = start
    return original[:start] + rendered + original[end:]


def check_env_file(path: str | os.PathLike[str]) -> tuple[Path, int | None, str]:
    """Where a write to `path` lands (symlinks followed), its current mode (None: new file) and its text; raises
    the error a write would meet (a folder, a missing parent folder, unreadable or non-UTF-8 content) without
    changing anything, so a command can check its target before doing work that a failed write would waste."""
    target = Path(path)
    real = Path(os.path.realpath(target))  # write through a symlink, never replace it
    if real.is_dir():
        raise InvalidInputError(f"{target} is a folder, not a .env file.", hint="Pass a file path to --env-file.")
    mode = file_mode(real)
    if mode is None:
        if not real.parent.is_dir():
            raise InvalidInputError(f"Cannot create {target}: folder {real.parent} does not exist.",
                                    hint="Create the folder first, or pass another path to --env-file.")
        return real, None, ""
    try:
        return real, mode, real.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{target} is not UTF-8 text; not rewriting it.",
                                hint="Fix the file's encoding, or pass another file to --env-file.") from None
    except OSError as exc:
        raise InvalidInputError(f"Cannot read {target}: {exc.strerror or exc}.",
                                hint="Check its permissions, or pass another file to --env-file.") from None


def set_env_values(path: str | os.PathLike[str], values: Mapping[str, str]) -> FileUpdate:
    """Set each `KEY=value` in the `.env` file at `path` (created 0600 if missing); see the module docstring."""
    target = Path(path)
    for key, value in values.items():
        if not _KEY_NAME.fullmatch(key):
            raise ValueError(f"not an environment variable name: {key!r}")
        if not isinstance(value, str):
            raise TypeError(f"{key}: value must be a string")
    real, mode_before, raw = check_env_file(target)
    bom = _BOM if raw.startswith(_BOM) else ""
    text = raw[len(bom):]
    newline = "\r\n" if "\r\n" in text else "\n"

    bindings = _bindings(text)
    current = _values(bindings)
    update = FileUpdate(path=target, created=mode_before is None, mode_before=mode_before)
    pending: dict[str, str] = {}
    for key, value in values.items():
        old = current.get(key)
        update.changes.append(KeyChange(key, old, value))
        if old != value:
            pending[key] = render_value(value)

    if pending:
        pieces: list[str] = []
        for binding in bindings:
            piece = binding.original.string
            if binding.key in pending and binding.value is not None:
                piece = _replace_value(piece, binding.key, pending[binding.key], newline)
            pieces.append(piece)
        new_text = "".join(pieces)
        for key, rendered in pending.items():
            if key not in current:
                if new_text and not new_text.endswith(("\n", "\r")):
                    new_text += newline
                new_text += f"{key}={rendered}{newline}"
        _check_round_trip(target, bindings, _bindings(new_text), values)
    else:
        new_text = text

    holds_secrets = any(is_secret_name(k) and v for k, v in {**current, **values}.items())
    update.mode_after = secure_mode(mode_before, holds_secrets)
    if pending or update.created:
        write_file(real, bom + new_text, mode=update.mode_after)
        update.written = True
    elif update.tightened:
        chmod_file(real, update.mode_after)
    return update


def _check_round_trip(path: Path, before, after, values: Mapping[str, str]) -> None:
    """The edited text must read back with the new values and every other assignment as it was."""
    old = [(b.key, b.value) for b in before if b.key is not None and b.key not in values]
    new = [(b.key, b.value) for b in after if b.key is not None and b.key not in values]
    got = _values(after)
    if old != new or any(got.get(k) != v for k, v in values.items()):
        raise InvalidInputError(f"Refusing to rewrite {path}: the edit would not read back as intended.",
                                hint=f"Edit {path} by hand, or pass another file to --env-file.")
