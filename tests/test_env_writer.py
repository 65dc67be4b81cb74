"""The `.env` writer: in-place edits that keep every other byte, quoting that reads back exactly, 0600 modes,
and a description of every change with secrets masked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from synth_ai.env.dotenv_files import read_env_file
from synth_ai.env.env_writer import render_value, set_env_values
from synth_ai.errors import InvalidInputError

SECRET = "sk_local_PLANTED0123456789abcdef"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_file_is_created_0600_and_described(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    update = set_env_values(env, {"SYNTH_API_KEY": SECRET, "TASK_APP_URL": "http://127.0.0.1:8001"})
    assert env.read_text() == f"SYNTH_API_KEY={SECRET}\nTASK_APP_URL=http://127.0.0.1:8001\n"
    assert mode(env) == 0o600
    assert update.created and update.written and update.changed
    lines = update.lines()
    assert lines == ["Created ./.env (mode 0600)", "Wrote SYNTH_API_KEY=sk_l…ef to ./.env",
                     "Wrote TASK_APP_URL=http://127.0.0.1:8001 to ./.env"]
    assert SECRET not in "\n".join(lines) + repr(update.to_dict())


def test_edit_in_place_keeps_comments_order_export_and_inline_comments(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    original = (
        "# project settings\n"
        "\n"
        "OPENAI_API_KEY=sk-other-value-keep   # keep me\n"
        "export SYNTH_API_KEY='sk_old_value_123'  # the key\n"
        "   ENVIRONMENT_API_KEY = old-env-key\n"
        "TASK_APP_URL=http://127.0.0.1:8001\n"
        "# trailing comment\n"
    )
    env.write_text(original)
    os.chmod(env, 0o600)
    update = set_env_values(env, {"SYNTH_API_KEY": SECRET, "ENVIRONMENT_API_KEY": "e" * 64})
    assert env.read_text() == (
        "# project settings\n"
        "\n"
        "OPENAI_API_KEY=sk-other-value-keep   # keep me\n"
        f"export SYNTH_API_KEY={SECRET}  # the key\n"
        f"   ENVIRONMENT_API_KEY = {'e' * 64}\n"
        "TASK_APP_URL=http://127.0.0.1:8001\n"
        "# trailing comment\n"
    )
    assert [c.action for c in update.changes] == ["updated", "updated"]
    assert update.lines()[0] == "Wrote SYNTH_API_KEY=sk_l…ef to ./.env (replaced sk_o…23)"
    values = read_env_file(env)
    assert values["SYNTH_API_KEY"] == SECRET and values["OPENAI_API_KEY"] == "sk-other-value-keep"


def test_unchanged_value_is_not_rewritten(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text(f"# mine\nexport SYNTH_API_KEY=\"{SECRET}\"\n")
    os.chmod(env, 0o600)
    before = env.stat()
    update = set_env_values(env, {"SYNTH_API_KEY": SECRET})
    after = env.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert not update.changed and update.changes[0].action == "unchanged"
    assert update.lines() == ["SYNTH_API_KEY=sk_l…ef already in ./.env (unchanged)"]


def test_every_assignment_of_the_key_is_updated_and_appends_keep_line_endings(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_bytes(b"A=1\r\nSYNTH_API_KEY=first\r\nB=2\r\nSYNTH_API_KEY=second")
    set_env_values(env, {"SYNTH_API_KEY": SECRET, "NEW_KEY": "x"})
    assert env.read_bytes() == (f"A=1\r\nSYNTH_API_KEY={SECRET}\r\nB=2\r\nSYNTH_API_KEY={SECRET}\r\n"
                                "NEW_KEY=x\r\n").encode()


def test_multiline_values_are_replaced_whole_and_lines_inside_them_are_not_assignments(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    original = ('CERT="-----BEGIN-----\nSYNTH_API_KEY=not-an-assignment\n-----END-----"\n'
                'SYNTH_API_KEY="multi\nline"\n'
                "LAST=1\n")
    env.write_text(original)
    set_env_values(env, {"SYNTH_API_KEY": SECRET})
    assert env.read_text() == ('CERT="-----BEGIN-----\nSYNTH_API_KEY=not-an-assignment\n-----END-----"\n'
                               f"SYNTH_API_KEY={SECRET}\n"
                               "LAST=1\n")
    assert read_env_file(env)["CERT"] == "-----BEGIN-----\nSYNTH_API_KEY=not-an-assignment\n-----END-----"


def test_byte_order_mark_and_missing_final_newline_are_handled(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_bytes("\ufeffA=1".encode())
    set_env_values(env, {"B": "2"})
    assert env.read_bytes() == "\ufeffA=1\nB=2\n".encode()


@pytest.mark.parametrize("value", [
    "plain-value_1.2:3@host/x+y=z", "with space", "hash # inside", "it's quoted", 'double "quotes"',
    "back\\slash", "multi\nline", "tab\there", "", "ünïcode", "$HOME-not-braced",
])
def test_values_read_back_exactly(isolated_home: Path, value: str) -> None:
    env = isolated_home / ".env"
    env.write_text("# c\nOTHER=keep\n")
    set_env_values(env, {"VALUE": value})
    assert read_env_file(env) == {"OTHER": "keep", "VALUE": value}
    set_env_values(env, {"VALUE": value + "2"})  # replacing a quoted value in place
    assert read_env_file(env) == {"OTHER": "keep", "VALUE": value + "2"}


def test_quoting() -> None:
    assert render_value("sk_local_abc") == "sk_local_abc"
    assert render_value("a b") == "'a b'"
    assert render_value("it's") == '"it\'s"'


def test_interpolation_syntax_is_refused(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text("A=1\n")
    with pytest.raises(InvalidInputError, match=r"\$\{"):
        set_env_values(env, {"B": "x${A}"})
    assert env.read_text() == "A=1\n"


def test_readable_file_with_secrets_is_tightened_and_says_so(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text("OTHER=1\n")
    os.chmod(env, 0o644)
    update = set_env_values(env, {"SYNTH_API_KEY": SECRET})
    assert mode(env) == 0o600
    assert update.tightened
    assert update.lines()[-1] == "Tightened ./.env from mode 0644 to 0600: it holds secrets and others could read it"


def test_unchanged_but_exposed_file_is_only_chmodded(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text(f"SYNTH_API_KEY={SECRET}\n")
    os.chmod(env, 0o640)
    inode = env.stat().st_ino
    update = set_env_values(env, {"SYNTH_API_KEY": SECRET})
    assert mode(env) == 0o600 and env.stat().st_ino == inode
    assert update.changed and not update.written and update.tightened


def test_mode_kept_when_nothing_secret(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text("A=1\n")
    os.chmod(env, 0o644)
    update = set_env_values(env, {"TASK_APP_URL": "http://127.0.0.1:8001"})
    assert mode(env) == 0o644 and not update.tightened


def test_symlink_is_written_through(isolated_home: Path) -> None:
    real = isolated_home / "real.env"
    real.write_text("A=1\n")
    os.chmod(real, 0o600)
    link = isolated_home / ".env"
    link.symlink_to(real)
    set_env_values(link, {"SYNTH_API_KEY": SECRET})
    assert link.is_symlink()
    assert real.read_text() == f"A=1\nSYNTH_API_KEY={SECRET}\n"


def test_unreadable_targets_are_refused_untouched(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_bytes(b"A=\xff\xfe\n")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        set_env_values(env, {"SYNTH_API_KEY": SECRET})
    assert env.read_bytes() == b"A=\xff\xfe\n"
    with pytest.raises(InvalidInputError, match="does not exist"):
        set_env_values(isolated_home / "missing" / ".env", {"A": "1"})
    with pytest.raises(InvalidInputError, match="folder"):
        set_env_values(isolated_home, {"A": "1"})
