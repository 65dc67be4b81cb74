"""Install commands install this project: the name `synth-ai` on the package index belongs to another project, so
no doc, example or message may tell pip or uvx to fetch it by that name; hints name the source this synth-ai was
installed from (its checkout, its wheel, its git URL) or a placeholder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from synth_ai.env.extras import UNKNOWN_SOURCE, _recorded_source, install_commands, pip_install, requirement

# Where install commands are written for users: the docs, the examples, the package (messages, its READMEs), the
# scripts and benches. tests/data holds the hosted product's docs verbatim (their `uvx synth-ai` is theirs).
SCANNED = ("README.md", "docs", "examples", "src", "scripts", "bench", ".ci")
SUFFIXES = {".md", ".py", ".toml", ".sh", ".txt", ""}
SKIPPED_PARTS = {"__pycache__", ".cache", "wheels", "demo_runs"}
INSTALL = re.compile(r"\b(?:uv\s+pip\s+install|python3?\s+-m\s+pip\s+install|pip3?\s+install|uv\s+tool\s+install)"
                     r"\b(?P<args>[^\n`()#;|&]*)")
RUN = re.compile(r"\b(?:uvx|uv\s+tool\s+run)\b(?P<args>[^\n`()#;|&]*)")
INDEX_NAME = re.compile(r"^synth[-_.]ai(\[[^\]]*\])?([=<>!~@].*)?$", re.IGNORECASE)


def _tokens(args: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError:  # an unbalanced quote in prose or an f-string: plain words will do
        return [t.strip("'\"") for t in args.split()]


def _names_the_index(token: str) -> bool:
    """`synth-ai`, `synth-ai[x]`, `synth_ai==0.1` ...: the index's project; `synth-ai[x] @ git+…` is a URL."""
    return bool(INDEX_NAME.match(token)) and " @ " not in token


def bare_index_installs(text: str) -> list[str]:
    """The commands in `text` that would install `synth-ai` from the package index by name."""
    found = []
    for match in INSTALL.finditer(text):
        tokens = _tokens(match.group("args"))
        if any(_names_the_index(t) for i, t in enumerate(tokens) if tokens[i + 1:i + 2] != ["@"]):
            found.append(match.group(0).strip())
    for match in RUN.finditer(text):
        tokens = _tokens(match.group("args"))
        if any(t == "--from" or t.startswith("--from=") for t in tokens):
            continue
        command = next((t for t in tokens if not t.startswith("-")), "")
        if _names_the_index(command):
            found.append(match.group(0).strip())
    return found


def _scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = REPO_ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        files += [p for p in candidates if p.is_file() and p.suffix in SUFFIXES
                  and not any(part in SKIPPED_PARTS or part.endswith(".egg-info")
                              for part in p.relative_to(REPO_ROOT).parts)]
    return files


@pytest.mark.parametrize("text", [
    "pip install synth-ai", "pip install 'synth-ai[verifiers]'", 'pip install "synth-ai[train]" torch==2.13.0',
    "python -m pip install -U synth_ai==0.1.0", "uv pip install synth-ai", "uvx synth-ai train --config x.toml",
    "uvx synth-ai@0.1.0 setup", "uv tool install synth-ai", "uv tool run synth-ai --help",
    "hint=\"pip install 'synth-ai[train]' (or just pillow)\"",
])
def test_the_check_catches_every_form_of_a_bare_index_install(text: str):
    assert bare_index_installs(text), text


@pytest.mark.parametrize("text", [
    "pip install -e '.[verifiers]'", "pip install './dist/synth_ai-0.1.0-py3-none-any.whl[train]' torch==2.13.0",
    "uvx --from . synth-ai train", "uvx --from /path/to/synth-ai synth-ai serve math-single-step --port 8001",
    "pip install 'synth-ai[modal] @ git+https://example.com/synth-ai.git'", f"pip install '{UNKNOWN_SOURCE}[train]'",
    "pip install pynacl (a dependency of synth-ai)", "pip install '{spec}'",
])
def test_the_check_lets_installs_of_this_project_through(text: str):
    assert not bare_index_installs(text), text


def test_no_doc_example_or_message_installs_synth_ai_from_the_index():
    files = _scanned_files()
    assert any(p.name == "extras.py" for p in files) and any(p.name == "quickstart.md" for p in files)
    offenders = [f"{p.relative_to(REPO_ROOT)}: {command}" for p in files
                 for command in bare_index_installs(p.read_text(encoding="utf-8", errors="replace"))]
    assert not offenders, "install commands that fetch another project from the index:\n" + "\n".join(offenders)


def _opening_commands(readme: str) -> list[str]:
    """The commands of the README's first fenced block, comments dropped."""
    assert readme.startswith("# synth-ai\n\n```bash\n")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_says_how_to_run_it_with_uvx_and_still_opens_with_its_two_commands():
    readme = (REPO_ROOT / "README.md").read_text()
    assert _opening_commands(readme) == ["./scripts/demo.sh", "./scripts/test.sh"]
    assert "uvx --from /path/to/synth-ai synth-ai" in readme and "uvx --from ./dist/synth_ai-" in readme


def test_a_checkout_a_wheel_and_a_git_install_each_name_their_own_source(tmp_path: Path, monkeypatch):
    wheel = tmp_path / "synth_ai-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    assert _recorded_source({"url": tmp_path.as_uri(), "dir_info": {"editable": True}}) == str(tmp_path)
    assert _recorded_source({"url": wheel.as_uri(), "archive_info": {}}) == str(wheel)
    assert _recorded_source({"url": (tmp_path / "gone.whl").as_uri(), "archive_info": {}}) is None
    assert _recorded_source({"url": "https://example.com/synth-ai.git", "vcs_info": {"vcs": "git"}}) == \
        "git+https://example.com/synth-ai.git"
    assert _recorded_source({"url": "https://example.com/synth_ai.whl", "archive_info": {}}) is None
    assert pip_install("modal", source=str(wheel)) == f"pip install '{wheel}[modal]'"
    assert requirement("vllm", source="git+https://example.com/s.git") == "synth-ai[vllm] @ git+https://example.com/s.git"
    monkeypatch.setattr("synth_ai.env.extras.install_source", lambda: None)  # installed from who knows where
    assert pip_install("train") == f"pip install '{UNKNOWN_SOURCE}[train]'"
    assert install_commands("train", "synth-ai train --config c.toml", source=str(tmp_path), cwd=tmp_path) == (
        "uv:  uvx --from '.[train]' synth-ai train --config c.toml\n"
        "pip: pip install '.[train]'   (then: synth-ai train --config c.toml)")


def test_this_checkout_hints_its_own_folder():
    assert pip_install("verifiers") == f"pip install '{REPO_ROOT}[verifiers]'"
