"""Running a doc page's fenced commands as a user would (tests/test_docs_run.py): reading the commands and sample
outputs out of the Markdown, applying the substitutions the test declares, running each command in a shell (long-
running ones in the background), and matching a sample output against what the command printed."""

from __future__ import annotations

import math
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TIMESTAMP = re.compile(r"\\\[\d\d:\d\d:\d\d\\\]")


@dataclass(frozen=True)
class Rule:
    """What the test does with one documented command. Every change is stated with its reason."""

    replace: tuple[tuple[str, str], ...] = ()  # (as written, as run): shown with `why`
    why: str = ""
    background: bool = False  # a server: started, waited for until it listens, stopped at the end
    stop_when_ready: bool = False  # a background server checked for start-up only (its port is needed later)
    skip: str = ""  # not run at all, and why
    shrink: str = ""  # a training config in the command that runs as a shrunk copy (SHRINK in the test)
    env: tuple[tuple[str, str], ...] = ()  # variables added to the command's environment


@dataclass
class Block:
    language: str
    text: str
    index: int  # among the page's blocks of the same kind (commands or outputs)


def blocks(page: Path) -> tuple[list[Block], list[Block]]:
    """The page's shell blocks and its sample-output blocks (fenced without a language)."""
    shells: list[Block] = []
    outputs: list[Block] = []
    for match in FENCE.finditer(page.read_text()):
        language, text = match.group(1), match.group(2)
        if language in {"bash", "sh", "shell"}:
            shells.append(Block(language, text, len(shells)))
        elif not language:
            outputs.append(Block(language, text, len(outputs)))
    return shells, outputs


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` inside quotes is kept)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(page: Path) -> list[str]:
    """Every command of the page's shell blocks, in order: continuation lines joined, comments dropped."""
    found: list[str] = []
    for block in blocks(page)[0]:
        pending = ""
        for raw in block.text.splitlines():
            line = _strip_comment(raw)
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            command = " ".join((pending + line).split())
            pending = ""
            if command:
                found.append(command)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listens(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Shell:
    """Runs commands with bash in `cwd` with `env`; keeps the background servers it started."""

    cwd: Path
    env: dict[str, str]
    servers: dict[str, subprocess.Popen] = field(default_factory=dict)
    transcript: list[str] = field(default_factory=list)

    def run(self, command: str, *, extra_env: dict[str, str] | None = None, timeout: float = 900) -> str:
        self.transcript.append(f"$ {command}")
        result = subprocess.run(["bash", "-c", command], cwd=self.cwd, env={**self.env, **(extra_env or {})},
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n{output[-6000:]}"
        return output

    def start(self, command: str, port: int, log: Path, extra_env: dict[str, str] | None = None) -> bool:
        """A server in the background until it listens on `port`; False when that very command already runs."""
        if command in self.servers and self.servers[command].poll() is None:
            self.transcript.append(f"$ {command} &   (already running)")
            return False
        self.transcript.append(f"$ {command} &")
        with log.open("ab") as handle:
            process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.cwd,
                                       env={**self.env, **(extra_env or {})},
                                       stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT)
        self.servers[command] = process
        deadline = time.monotonic() + 240  # a loaded machine imports slowly; verifiers loads its tasks first
        while not listens(port):
            assert process.poll() is None, f"`{command}` exited {process.returncode}:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"`{command}` did not listen on {port}:\n{log.read_text()[-4000:]}"
            time.sleep(0.3)
        return True

    def stop(self, command: str) -> None:
        process = self.servers.pop(command)
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop_all(self) -> None:
        for command in list(self.servers):
            self.stop(command)


def shrunk_toml(text: str, changes: dict[tuple[str, str], str]) -> tuple[str, list[str]]:
    """`text` with the values of `changes` ((table, key) -> TOML value) put in place, and what changed."""
    table, lines, said = "", [], []
    for line in text.splitlines():
        header = re.match(r"^\[([\w.]+)\]\s*$", line)
        if header:
            table = header.group(1)
        setting = re.match(r"^(\w+)\s*=\s*(.*)$", line)
        if setting and (table, setting.group(1)) in changes:
            new = changes[(table, setting.group(1))]
            if new != setting.group(2):
                said.append(f"[{table}].{setting.group(1)}: {setting.group(2)} -> {new}")
                line = f"{setting.group(1)} = {new}"
        lines.append(line)
    return "\n".join(lines) + "\n", said


NUMBER = re.compile(r"-?\d[\d,]*\.\d+")


def _line_pattern(line: str) -> tuple[re.Pattern[str], list[float]]:
    """A sample line as a pattern: `…` stands for anything, `[HH:MM:SS]` for any time, a decimal number for any
    number (returned, to compare with a tolerance: another CPU may round the last digit differently)."""
    numbers = [float(n.replace(",", "")) for n in NUMBER.findall(line)]
    parts = NUMBER.split(line)
    pattern = r"(-?\d[\d,]*\.\d+)".join(re.escape(p) for p in parts)
    pattern = TIMESTAMP.sub(r"\\[\\d\\d:\\d\\d:\\d\\d\\]", pattern).replace("…", ".*?")
    return re.compile(pattern), numbers


def sample_mismatches(sample: str, output: str, *, rel_tol: float = 0.02) -> list[str]:
    """The sample's lines that match no line of `output` (text exactly, numbers within `rel_tol`). A progress
    bar line (terminal only) is skipped here: the test checks its numbers against the log lines."""
    problems = []
    for line in (s.strip() for s in sample.splitlines()):
        if not line or "━" in line:
            continue
        pattern, numbers = _line_pattern(line)
        found = [m for m in map(pattern.search, output.splitlines()) if m]
        if not found:
            problems.append(f"no output line matches {line!r}")
            continue
        values = [[float(g.replace(",", "")) for g in m.groups()] for m in found]
        if not any(all(math.isclose(a, b, rel_tol=rel_tol) for a, b in zip(numbers, v)) for v in values):
            problems.append(f"{line!r}: the run printed {[m.group(0) for m in found]}")
    return problems

