"""Run inside synth-ai 0.2.17's virtualenv: validate configs the way that release's commands do before they reach
the network, and print one JSON list of {"path", "kind", "errors"} on stdout.

argv[1] is a JSON list of {"path", "kind", "allow_experimental"}; `kind` is rl, sft, eval or filter (for rl and sft it
is what `train --type` would be told). Relative dataset paths resolve from the working directory, as in 0.2.17.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tomllib
from pathlib import Path


def _message(exc: BaseException) -> str:
    # 0.2.17's train errors keep their text in .detail (their str() is empty); click's in .message
    parts = [str(exc), str(getattr(exc, "detail", "") or ""), str(getattr(exc, "message", "") or "")]
    return f"{type(exc).__name__}: " + " | ".join(p.strip() for p in parts if p and p.strip())


def _check(path: Path, kind: str, allow_experimental: bool) -> None:
    if kind == "rl":
        from synth_ai.api.train.builders import build_rl_payload
        build_rl_payload(config_path=path, task_url="", overrides={"task_url": "http://127.0.0.1:9"},
                         idempotency=None, allow_experimental=allow_experimental)
    elif kind == "sft":
        from synth_ai.api.train.builders import build_sft_payload
        build_sft_payload(config_path=path, dataset_override=None, allow_experimental=allow_experimental)
    elif kind == "eval":
        from synth_ai.cli.commands.eval.validation import validate_eval_options
        from synth_ai.task.config import EvalConfig
        section = tomllib.loads(path.read_text()).get("eval")
        EvalConfig.from_dict(dict(validate_eval_options(dict(section))))
    elif kind == "filter":
        from synth_ai.cli.commands.filter.validation import validate_filter_options
        from synth_ai.task.config import FilterConfig
        section = tomllib.loads(path.read_text()).get("filter")
        FilterConfig.from_dict(dict(validate_filter_options(dict(section))))
    else:
        raise ValueError(f"unknown kind {kind!r}")


def main() -> None:
    results = []
    for job in json.loads(sys.argv[1]):
        errors: list[str] = []
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the builders echo warnings; stdout carries the JSON
                _check(Path(job["path"]), job["kind"], bool(job.get("allow_experimental")))
        except BaseException as exc:  # noqa: BLE001 - every refusal is a finding, whatever its type
            errors.append(_message(exc))
        results.append({"path": job["path"], "kind": job["kind"], "errors": errors})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
