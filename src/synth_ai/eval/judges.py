"""Judges: Python callables that score a rollout, named in `[eval.judge]` (one table with `module` or `path`, or
nested tables one per judge) and `[[eval.judges]]`, as synth-ai 0.2.17 reads them.

A judge is `callable(payload, **kwargs)`: `callable`/`function` names the attribute (default `judge`), every other
key but `module`, `path`, `name` is passed as a keyword argument. The payload is `{seed, prompt_index, prompt,
completion, metrics, response, trace}`. It returns a number (or a mapping with a numeric `score`); anything
else, or an exception, gives no score for that seed (reported, never a zero). A relative `path` is read from the
config file's folder, then from the working directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.errors import InvalidInputError

RESERVED = {"module", "path", "callable", "function", "name"}


@dataclass
class Judge:
    name: str
    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def score(self, payload: dict[str, Any]) -> float | None:
        """The judge's score; raises what the judge raises (the runner reports it)."""
        result = self.fn(payload, **self.kwargs)
        if isinstance(result, dict):
            result = result.get("score")
        if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result):
            raise ValueError(f"returned {result!r}, not a finite number")
        return float(result)


def judge_tables(cfg: dict[str, Any]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(key path, name hint, table) of every judge the config declares."""
    found: list[tuple[str, str | None, dict[str, Any]]] = []
    judge = cfg.get("judge")
    if isinstance(judge, dict) and judge:
        nested = [(k, v) for k, v in judge.items() if isinstance(v, dict)]
        if any(k in judge for k in RESERVED) and not nested:
            found.append(("[eval.judge]", None, judge))
        else:
            found.extend((f"[eval.judge.{k}]", k, v) for k, v in nested)
    for index, entry in enumerate(cfg.get("judges") or []):
        if isinstance(entry, dict):
            found.append((f"[[eval.judges]] #{index + 1}", entry.get("name"), entry))
    return found


def load_judges(cfg: dict[str, Any], config_dir: Path | None) -> list[Judge]:
    judges: list[Judge] = []
    for where, hint, table in judge_tables(cfg):
        module = _import(where, table, config_dir)
        attr = str(table.get("callable") or table.get("function") or "judge")
        fn = getattr(module, attr, None)
        if not callable(fn):
            raise InvalidInputError(f"{where}: judge callable {attr!r} not found in {module.__name__}.",
                                    hint="Define `def judge(payload, **kwargs) -> float` there, or set callable = "
                                         "\"<function name>\".")
        name = str(table.get("name") or hint or f"judge{len(judges) + 1}")
        if any(j.name == name for j in judges):
            raise InvalidInputError(f"{where}: two judges are named {name!r}.", hint="Give each judge its own name.")
        judges.append(Judge(name, fn, {k: v for k, v in table.items() if k not in RESERVED}))
    return judges


def _import(where: str, table: dict[str, Any], config_dir: Path | None) -> Any:
    module_name, path = table.get("module"), table.get("path")
    if bool(module_name) == bool(path):
        raise InvalidInputError(f"{where}: a judge needs exactly one of `module` or `path`.",
                                hint='Set module = "my_pkg.judges" or path = "judges/score.py".')
    if module_name:
        try:
            return importlib.import_module(str(module_name))
        except Exception as exc:  # the user's module: any failure is reported with its name
            raise InvalidInputError(f"{where}: cannot import judge module {module_name!r}: "
                                    f"{type(exc).__name__}: {exc}",
                                    hint="Check the module name and that it is importable (PYTHONPATH).") from None
    raw = Path(str(path)).expanduser()
    candidates = [raw] if raw.is_absolute() else [p / raw for p in (config_dir, Path.cwd()) if p is not None]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise InvalidInputError(f"{where}: judge file not found: {', '.join(str(c) for c in candidates)}",
                                hint="Paths are read from the config file's folder, then the working directory.")
    spec = importlib.util.spec_from_file_location(f"_synth_eval_judge_{found.stem}_{abs(hash(found))}", found)
    if spec is None or spec.loader is None:
        raise InvalidInputError(f"{where}: cannot load {found} as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file
        sys.modules.pop(spec.name, None)
        raise InvalidInputError(f"{where}: {found} failed to import: {type(exc).__name__}: {exc}") from None
    return module
