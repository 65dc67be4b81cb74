"""Every TOML under examples/ also passes synth-ai 0.2.17's own validation (the checks its `train`, `eval` and
`filter` run before reaching the network), when its virtualenv from `bench/reference_env.py` is present.

0.2.17 accepts only real model SKUs, so a config on a tiny local model fails there on its model id; for those the
test checks that the model id is the only difference: with the id swapped for a real SKU, the config passes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from reference_support import REF_PYTHON

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config

VALIDATOR = REPO_ROOT / "tests" / "data" / "reference" / "validate_configs.py"
EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.toml"))
# the local models and the smallest real SKU of the same family
TINY_TO_SKU = {"synth-ai/tiny-qwen3": "Qwen/Qwen3-0.6B", "synth-ai/tiny-qwen3-vl": "Qwen/Qwen3-VL-2B-Instruct",
               "synth-ai/tiny-qwen3-hd64": "Qwen/Qwen3-0.6B"}

pytestmark = pytest.mark.reference_venv


def _with_real_sku(text: str) -> str:
    for tiny, sku in TINY_TO_SKU.items():
        text = text.replace(f'"{tiny}"', f'"{sku}"')
    return text


def _reference_results(jobs: list[dict]) -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # 0.2.17's synth_ai, not ours
    done = subprocess.run([str(REF_PYTHON), str(VALIDATOR), json.dumps(jobs)], cwd=REPO_ROOT, check=False,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["path"]: r["errors"] for r in json.loads(done.stdout.strip().splitlines()[-1])}


def test_examples_pass_the_reference_validators(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)  # dataset paths in the examples are relative to the repository root, in both
    ctx = ResolveContext(environ={}, allow_experimental=True, require_dataset=True)
    jobs: list[dict] = []
    swapped: dict[str, str] = {}  # example -> its copy on a real SKU
    for path in EXAMPLES:
        rel = str(path.relative_to(REPO_ROOT))
        # 0.2.17 is told the kind ours reads, as `train --type` would tell it; experimental models are the same
        # opt-in in both, so the flag is given to both
        kind = load_config(path, None, ctx).kind
        jobs.append({"path": rel, "kind": kind, "allow_experimental": True})
        text = path.read_text()
        if _with_real_sku(text) != text:
            copy = tmp_path / rel.replace("/", "__")
            copy.write_text(_with_real_sku(text))
            swapped[rel] = str(copy)
            jobs.append({"path": str(copy), "kind": kind, "allow_experimental": True})
    assert swapped, "expected at least one example on a tiny local model"

    results = _reference_results(jobs)
    failures = {}
    for path in EXAMPLES:
        rel = str(path.relative_to(REPO_ROOT))
        errors = results[rel]
        if rel in swapped:
            # the original fails on its model id alone: nothing else is wrong once the id is a real SKU
            off_model = [e for e in errors if not any(f"'{tiny}' is not supported" in e for tiny in TINY_TO_SKU)]
            errors = off_model + results[swapped[rel]]
        if errors:
            failures[rel] = errors
    assert not failures, json.dumps(failures, indent=2)
