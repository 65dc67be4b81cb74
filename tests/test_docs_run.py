"""docs/quickstart.md and docs/verifiers.md run as written: every fenced command, in page order, in a fresh folder,
through a shell, against the real CLI, the embedded backend it starts and the bundled task apps, with the tiny
models. Sample outputs on the pages are compared with what the commands print.

What a CI machine cannot run is substituted, visibly: EVERYWHERE applies to every command, RULES to one command,
SHRINK to the training configs a command names (a shrunk copy is written into the folder). Each change is printed
with its reason (`pytest -s` shows them; a failure's message carries them), so a reader sees exactly what ran.
A command the pages gain without a rule fails `test_every_documented_command_has_a_rule`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, link_tiny
from conftest import REPO_ROOT
from docs_run_support import Rule, Shell, blocks, commands, free_port, sample_mismatches, shrunk_toml

pytestmark = pytest.mark.slow
QUICKSTART = REPO_ROOT / "docs/quickstart.md"
VERIFIERS = REPO_ROOT / "docs/verifiers.md"
TINY_WHY = "Qwen3-4B's weights and a GPU are not on a CI machine; the tiny Qwen3 has the same architecture"

# (as written, as run, why): every command.
EVERYWHERE = [
    ("Qwen/Qwen3-4B", TINY_TEXT, TINY_WHY),
    ("--seeds 0-99 ", "--seeds 0-3 ", "a few held-out seeds, for the test's time"),
    ("--seeds 0-999 ", "--seeds 0-7 ", "a few training seeds, for the test's time"),
]
# Documented ports -> free ones (a CI machine may run something on them); the backend's 8000 through
# SYNTH_AI_BACKEND_DEFAULT_PORT, which docs/backend.md describes.
PORTS = (8001, 8103)
INSTALL_PREFIXES = ("./scripts/bootstrap.sh", "pip install", "pip wheel", "uv pip install", ". .venv/bin/activate")
INSTALL_WHY = "installs: the test runs inside the installed environment (its venv's bin first on PATH)"
# Running an installed copy with uvx names a checkout or wheel path the reader fills in; tests/test_wheel.py builds
# the wheel and runs `uvx --from <wheel> synth-ai task-app list` for real.
UVX_PREFIX = "uvx --from "
UVX_WHY = "runs a checkout or wheel by a path the reader fills in: tests/test_wheel.py runs it from a built wheel"

RULES: dict[str, Rule] = {
    "synth-ai config schema sft > sft.schema.json": Rule(),
    "synth-ai demo": Rule(replace=(("synth-ai demo", "synth-ai demo --fast"),),
                          why="--fast: what CI runs (docs/demo.md); the same loop with fewer seeds"),
    "synth-ai task-app validate --url http://127.0.0.1:8001": Rule(),
    "synth-ai serve math-single-step --port 8001": Rule(background=True),
    "synth-ai setup": Rule(replace=(("synth-ai setup", "synth-ai setup --local"),),
                           why="the hosted setup opens a browser; --local writes the same two keys"),
    "synth-ai deploy math-single-step --name my-math": Rule(
        replace=(("synth-ai deploy math-single-step --name my-math", "synth-ai serve math-single-step --port 8001"),),
        background=True, why="Modal is not reachable from CI: the page's alternative, `serve` (already running)"),
    "synth-ai filter --config examples/configs/filter_math_train.toml": Rule(
        shrink="examples/configs/filter_math_train.toml"),
    "synth-ai train --type sft --config examples/configs/sft_full_qwen3_4b.toml --dataset ft_data/math_correct.jsonl":
        Rule(replace=(("examples/configs/sft_full_qwen3_4b.toml", "examples/configs/sft_tiny_local.toml"),),
             why="section 5's config: a full fine-tune of the tiny Qwen3 (the Qwen3-4B one asks for 4 H100s)"),
    "synth-ai train --type rl --config examples/configs/rl_text_qwen3_4b.toml --task-url \"$TASK_APP_URL\" "
    "--model ft:Qwen/Qwen3-4B:<job id>": Rule(shrink="examples/configs/rl_text_qwen3_4b.toml"),
    "synth-ai serve verifiers:<target> --port 8103 [--env-args '{\"num_tasks\": 50}']": Rule(
        replace=(("<target>", "examples/verifiers/arithmetic_env.py"),
                 ("[--env-args '{\"num_tasks\": 50}']", "--env-args '{\"num_tasks\": 50}'")),
        background=True, stop_when_ready=True, env=(("ENVIRONMENT_API_KEY", "sk_env_docs_template_0123456789"),),
        why="the template with the worked example's environment; a key of its own, as the page's `setup --local` "
            "comes later"),
    "synth-ai serve verifiers:examples/verifiers/arithmetic_env.py --port 8103 --trace traces/ &": Rule(
        replace=((" &", ""),), background=True),
    "synth-ai train --type rl --config examples/configs/rl_tiny_verifiers.toml": Rule(
        shrink="examples/configs/rl_tiny_verifiers.toml"),
}
RL_SMALL = {("training", "iterations_per_epoch"): "1", ("training", "batch_size"): "2",
            ("evaluation", "instances"): "2", ("evaluation", "seeds"): "[0, 1]", ("evaluation", "every_n_iters"): "1"}
SHRINK: dict[str, tuple[dict[tuple[str, str], str], str]] = {
    "examples/configs/rl_text_qwen3_4b.toml": (
        {**RL_SMALL, ("model", "base"): f'"{TINY_TEXT}"', ("training", "group_size"): "2",
         ("rollout.policy_config", "max_tokens"): "32"},
        "RL on the tiny model: one iteration of 2 seeds x 2 rollouts, short answers"),
    "examples/configs/rl_tiny_verifiers.toml": ({**RL_SMALL, ("training", "group_size"): "4"},
                                                 "one iteration of 2 seeds x 4 rollouts (the page's run took 6 min)"),
    "examples/configs/filter_math_train.toml": ({("filter", "min_official_score"): "0.0"},
                                                "the tiny model solves no math problem: keep every sampled episode"),
}
# Sample outputs (fenced blocks without a language): the command whose output each shows, or why it is not run.
SAMPLES = {
    (QUICKSTART, 0): "illustration: the report for a broken config of the reader's, not a file of the docs",
    (QUICKSTART, 1): "synth-ai train --config examples/configs/sft_tiny_local.toml",
    (VERIFIERS, 0): "synth-ai eval --config examples/configs/eval_verifiers.toml",
}
FOLLOWS = re.compile(r"^fine_tuned_model: ((ft|rl):\S+:(\S+))$", re.M)


def rule_for(command: str) -> Rule | None:
    if command.startswith(INSTALL_PREFIXES):
        return Rule(skip=INSTALL_WHY)
    if command.startswith(UVX_PREFIX):
        return Rule(skip=UVX_WHY)
    plain = command.startswith("synth-ai ") and not re.search(r"[|;&\[\]]|\s>\s", command)
    return RULES.get(command, Rule() if plain else None)


def test_every_documented_command_has_a_rule():
    """A command a page gains is either plain (`synth-ai` and words) or named in RULES; no rule is left over."""
    found = commands(QUICKSTART) + commands(VERIFIERS)
    assert [c for c in found if rule_for(c) is None] == []
    assert [c for c in RULES if c not in found] == []
    outputs = [(page, b.index) for page in (QUICKSTART, VERIFIERS) for b in blocks(page)[1]]
    assert sorted(outputs) == sorted(SAMPLES)
    for config in SHRINK:
        assert (REPO_ROOT / config).is_file(), config


def test_a_sample_that_drifted_from_the_run_is_caught():
    """The matcher on the quickstart's old section 5 sample (12 steps, loss 0.397) and what a run prints."""
    printed = ("[03:02:41] [4] sft.training.started (info): Training synth-ai/tiny-qwen3 (full) for 18 steps on 24 "
               "examples (cpu, fp32).\ntrain.loss = 0.4168 (step 17)\nFinal status: succeeded\n")
    old = "[20:03:31] [4] sft.training.started (info): …\ntrain.loss = 0.397 (step 11)\nFinal status: succeeded\n"
    assert sample_mismatches(old, printed) == ["no output line matches 'train.loss = 0.397 (step 11)'"]
    assert sample_mismatches(old.replace("(step 11)", "(step 17)"), printed) == [
        "'train.loss = 0.397 (step 17)': the run printed ['train.loss = 0.4168 (step 17)']"]
    assert sample_mismatches("train.loss = 0.4170 (step 17)", printed) == []  # the last digit of another CPU


class PageRun:
    """One page's commands in a fresh folder: the substitutions, the servers, the job ids they print."""

    def __init__(self, folder: Path, data_dir: Path) -> None:
        (folder / "examples").symlink_to(REPO_ROOT / "examples", target_is_directory=True)
        self.folder = folder
        self.ports = {port: free_port() for port in PORTS}
        env = dict(os.environ)
        venv_bin = str(Path(sys.executable).parent)
        env.update(PATH=f"{venv_bin}:{env.get('PATH', '')}", SYNTH_AI_HOME=str(data_dir), OMP_NUM_THREADS="1",
                   SYNTH_AI_BACKEND_DEFAULT_PORT=str(free_port()), PYTHONUNBUFFERED="1",
                   # the tiny model's head size is one vLLM's CPU attention does not run: sample with ours
                   SYNTH_AI_ROLLOUT_ENGINE="builtin")
        self.shell = Shell(folder, env)
        self.outputs: dict[str, str] = {}
        self.jobs: dict[str, str] = {}  # "ft" / "rl" -> the latest job id
        self.changes: list[str] = []

    def substituted(self, command: str, rule: Rule) -> str:
        text = command
        for old, new in rule.replace:
            text = text.replace(old, new)
        for old, new, why in EVERYWHERE:
            if old in text + " ":
                text = (text + " ").replace(old, new).rstrip()
                self.changes.append(f"{old.strip()} -> {new.strip()}: {why}")
        for port, free in self.ports.items():
            text = re.sub(rf"(--port |127\.0\.0\.1:){port}\b", rf"\g<1>{free}", text)
        text = text.replace("<job id>", self.jobs.get("ft", "<job id>"))
        text = text.replace("<rl job id>", self.jobs.get("rl", "<rl job id>"))
        if rule.shrink:
            text = text.replace(rule.shrink, self.shrunk(rule.shrink))
        if text != command:
            self.changes.append(f"`{command}` ran as `{text}`" + (f" ({rule.why})" if rule.why else ""))
        return text

    def shrunk(self, config: str) -> str:
        changes, why = SHRINK[config]
        text = (REPO_ROOT / config).read_text()
        for port, free in self.ports.items():
            text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        text, said = shrunk_toml(text, changes)
        copy = self.folder / "shrunk" / Path(config).name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(text)
        self.changes.append(f"{config}: {'; '.join(said)} ({why})")
        return str(copy.relative_to(self.folder))

    def run(self, command: str) -> None:
        rule = rule_for(command)
        assert rule is not None, f"no rule for {command!r}"
        if rule.skip:
            self.changes.append(f"`{command}` not run: {rule.skip}")
            return
        text = self.substituted(command, rule)
        if rule.background:
            port = int(re.search(r"--port (\d+)", text).group(1))
            log = self.folder / f"server-{port}.log"
            if self.shell.start(text, port, log, dict(rule.env)) and rule.stop_when_ready:
                self.shell.stop(text)
            return
        extra = dict(rule.env)
        if "$TASK_APP_URL" in text:  # what the page's `deploy` (here `serve`) gives the reader to export
            extra["TASK_APP_URL"] = f"http://127.0.0.1:{self.ports[8001]}"
            self.changes.append(f"TASK_APP_URL={extra['TASK_APP_URL']}: the served math app (`deploy` prints the URL)")
        output = self.shell.run(text, extra_env=extra)
        self.outputs[command] = output
        for _model, kind, job_id in FOLLOWS.findall(output):
            self.jobs[kind] = job_id
        assert not re.search(r"loss -?0\.0000\b", output), f"`{text}` printed an uninformative loss:\n{output}"

    def report(self) -> str:
        return "Substitutions:\n  " + "\n  ".join(dict.fromkeys(self.changes)) + "\n" + "\n".join(
            self.shell.transcript)


def _run_page(page: Path, folder: Path, data_dir: Path, then: Callable[[PageRun], None] = lambda run: None) -> PageRun:
    """Every command of `page` in order, then `then` (while the backend still runs), then the samples' check."""
    run = PageRun(folder, data_dir)
    try:
        for command in commands(page):
            try:
                run.run(command)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n\n{run.report()}") from None
        then(run)
    finally:
        run.shell.stop_all()
        run.shell.run("synth-ai backend stop")
    print(run.report())
    for block in blocks(page)[1]:
        source = SAMPLES[(page, block.index)]
        if not source.startswith("illustration"):
            problems = sample_mismatches(block.text, run.outputs[source])
            assert not problems, f"{page.name} sample {block.index}: {problems}\n{run.outputs[source][-4000:]}"
    return run


@pytest.fixture
def data_dir(tmp_path: Path, tiny_text_models: list[Path]) -> Path:
    home = tmp_path / "synth-ai-home"
    link_tiny(home, tiny_text_models)
    return home


def _progress_bar_agrees(sample: str, output: str) -> None:
    """The terminal's bar line of the sample against the log lines of the same run: steps and final loss."""
    (bar,) = [line for line in sample.splitlines() if "━" in line]
    done, total = map(int, re.search(r"(\d+)/(\d+)", bar).groups())
    assert done == total and f"for {total} steps" in output, (bar, output[-3000:])
    loss = float(re.search(r"loss ([\d.]+)", bar).group(1))
    last = float(re.findall(r"^train\.loss = ([\d.]+)", output, re.M)[-1])
    assert last == pytest.approx(loss, rel=0.02)


def test_the_quickstart_runs_as_written(tmp_path: Path, data_dir: Path):
    work = tmp_path / "quickstart"
    work.mkdir()
    run = _run_page(QUICKSTART, work, data_dir, then=lambda run: _demo_report_reruns(run, work))
    sample = blocks(QUICKSTART)[1][1].text
    _progress_bar_agrees(sample, run.outputs[SAMPLES[(QUICKSTART, 1)]])
    assert run.jobs.keys() == {"ft", "rl"}
    assert (work / "ft_data" / "math_correct.jsonl").stat().st_size > 0


def _demo_report_reruns(run: PageRun, work: Path) -> None:
    """The demo's report.md says which services its commands need: started as it says, a step re-runs."""
    (report,) = work.glob("demo_runs/*/report.md")
    text = report.read_text()
    serve = re.search(r"`(synth-ai serve color-quiz --port (\d+))`", text)
    assert serve and "## Re-running a step by hand" in text, text
    (baseline,) = re.findall(r"- baseline: `(synth-ai eval [^`]+)`", text)
    shell = Shell(report.parent, run.shell.env)
    try:
        shell.run("synth-ai setup --local")
        shell.start(serve.group(1), int(serve.group(2)), report.parent / "rerun-task-app.log")
        output = shell.run(baseline)
    finally:
        shell.stop_all()
    assert "Eval complete: 16 ok, 0 failed" in output, output[-3000:]


def test_the_verifiers_worked_example_runs_as_written(tmp_path: Path, data_dir: Path):
    pytest.importorskip("verifiers.v1")
    work = tmp_path / "verifiers"
    work.mkdir()
    run = _run_page(VERIFIERS, work, data_dir)
    assert run.jobs.keys() == {"rl"}
    assert (work / "ft_data" / "arithmetic_sft.jsonl").stat().st_size > 0
