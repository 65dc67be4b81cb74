"""`synth-ai files validate`: exit codes, human and --json output."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from synth_ai.errors import ExitCode

PNG = b"\x89PNG\r\n\x1a\n" + bytes(300)
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}


def chat(*parts) -> dict:
    return {"messages": [{"role": "user", "content": list(parts) or "hi"}, {"role": "assistant", "content": "ok"}]}


def write(path: Path, *lines) -> Path:
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_valid_file(cli, tmp_path):
    path = write(tmp_path / "good.jsonl", chat(), chat({"type": "text", "text": "look"}, IMAGE))
    result = cli("files", "validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"✓ {path}: valid SFT dataset" in result.stdout
    assert "2 examples, 4 turns, 1 images" in result.stdout
    assert "sha256" not in result.stdout

    result = cli("files", "validate", str(path), "--sha256")
    assert f"sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}" in result.stdout


def test_invalid_file_names_file_and_lines(cli, tmp_path):
    path = write(tmp_path / "bad.jsonl", chat(), "", "{nope", {"messages": [{"role": "user", "content": "x"}]})
    result = cli("files", "validate", str(path))
    assert result.exit_code == ExitCode.INVALID_INPUT == 3
    assert f"✗ {path}: Dataset validation failed in 2 of 3 records (2 problems):" in result.stdout
    assert " - Line 3: invalid JSON (Expecting property name enclosed in double quotes at column 2)" in result.stdout
    assert " - Line 4: missing messages[] with at least 2 turns (found 1)" in result.stdout
    assert "Hint:" in result.stdout and "docs/datasets.md" in result.stdout

    assert cli("files", "validate", str(path), "--min-messages", "1").exit_code == 3  # line 3 is still bad


def test_json_output(cli, tmp_path):
    path = write(tmp_path / "bad.jsonl", chat(), *(["{"] * 25))
    result = cli("files", "validate", str(path), "--json", "--max-errors", "3")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)  # exactly one document
    assert doc["ok"] is False and doc["path"] == str(path)
    assert doc["error_count"] == 25 and doc["errors_omitted"] == 22
    assert doc["errors"] == [{"line": n, "message": doc["errors"][0]["message"]} for n in (2, 3, 4)]
    assert doc["summary"]["records"] == 26 and doc["summary"]["examples"] == 1
    assert set(doc) >= {"warnings", "warning_count", "sha256", "model", "min_messages", "hint"}

    good = write(tmp_path / "good.jsonl", chat())
    result = cli("--json", "files", "validate", str(good), "--sha256")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["sha256"] == hashlib.sha256(good.read_bytes()).hexdigest()


def test_missing_file(cli, tmp_path):
    missing = tmp_path / "nope.jsonl"
    result = cli("files", "validate", str(missing))
    assert result.exit_code == ExitCode.NOT_FOUND == 8
    assert f"Dataset not found: {missing}" in result.stderr

    result = cli("files", "validate", str(missing), "--json")
    assert result.exit_code == 8
    assert json.loads(result.stdout)["error"]["code"] == "not_found"


def test_model_checks(cli, tmp_path):
    path = write(tmp_path / "vision.jsonl", chat(IMAGE, IMAGE))
    result = cli("files", "validate", str(path), "--model", "Qwen/Qwen3-4B")
    assert result.exit_code == 3
    assert "Line 1: record has 2 image(s) but Qwen/Qwen3-4B accepts text only" in result.stdout

    result = cli("files", "validate", str(path), "--model", "Qwen/Qwen3-VL-2B-Instruct")
    assert result.exit_code == 0
    assert "(1 trimmed)" in result.stdout
    assert "warning: Line 1: message 0 has 2 images" in result.stderr

    result = cli("files", "validate", str(path), "--model", "NoSuch/Model", "--json")
    assert result.exit_code == 3
    assert "not supported" in json.loads(result.stdout)["error"]["message"]


def test_usage_errors(cli, tmp_path):
    path = write(tmp_path / "good.jsonl", chat())
    assert cli("files", "validate", str(path), "--max-errors", "-1").exit_code == ExitCode.USAGE
    assert cli("files", "validate").exit_code == ExitCode.USAGE
    assert cli("files", "validate", str(path), "--min-messages", "0").exit_code == ExitCode.USAGE


def test_workers_give_the_same_report(cli, tmp_path):
    path = write(tmp_path / "mixed.jsonl", *[chat(IMAGE) if i % 7 else "{" for i in range(400)])
    one = json.loads(cli("files", "validate", str(path), "--json", "--workers", "1").stdout)
    three = json.loads(cli("files", "validate", str(path), "--json", "--workers", "3").stdout)
    assert one == three and one["error_count"] == 58
