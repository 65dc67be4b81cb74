"""The order test modules are handed to pytest-xdist workers: the longest first.

`--dist loadfile` gives each worker whole modules, one at a time, in the order collected (test.sh turns off
xdist's own reordering, which sorts by the number of tests and so sends a 2-test, 4-minute module last). A long
module started last leaves the other worker idle until it ends; started first, the short ones fill in around it
(longest-processing-time-first scheduling). The seconds per module come from `module_seconds.json`, written from a
run's JUnit XML:

    .venv/bin/python -m pytest -n 2 --dist loadfile --junitxml=/tmp/run.xml
    .venv/bin/python tests/module_order.py /tmp/run.xml       # rewrites tests/module_seconds.json

A module not listed there counts as NEW_MODULE_S. Modules that need the synth-ai 0.2.17 reference venv wait until
the work before them adds up to REFERENCE_AFTER_S per worker, as test.sh may still be building that venv in the
background when the run starts (tests/reference_support.py waits for it).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
NEW_MODULE_S = 10.0
REFERENCE_AFTER_S = 240.0  # about what building the reference venv takes on a 2-core machine with no cache


def module_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(SECONDS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def order_modules(modules: list[str], seconds: dict[str, float], needs_reference: set[str],
                  workers: int) -> list[str]:
    """`modules` (paths relative to the repo), the longest first; those in `needs_reference` no earlier than
    REFERENCE_AFTER_S of work per worker."""
    def weight(module: str) -> float:
        return seconds.get(module, NEW_MODULE_S)

    by_weight = sorted(modules, key=lambda m: (-weight(m), m))
    first = [m for m in by_weight if m not in needs_reference]
    later = [m for m in by_weight if m in needs_reference]
    out: list[str] = []
    done = 0.0
    for module in first:
        if later and done >= REFERENCE_AFTER_S * max(1, workers):
            out.extend(later)
            later = []
        out.append(module)
        done += weight(module)
    return out + later


def reorder_items(items: list[Any], workers: int) -> None:
    """Sort pytest's collected `items` in place, module by module (tests within a module keep their order)."""
    per_module: dict[str, list[Any]] = defaultdict(list)
    needs_reference: set[str] = set()
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        per_module[module].append(item)
        if item.get_closest_marker("reference_venv") is not None:
            needs_reference.add(module)
    order = order_modules(list(per_module), module_seconds(), needs_reference, workers)
    items[:] = [item for module in order for item in per_module[module]]


def seconds_from_junit(xml_path: Path) -> dict[str, float]:
    """Seconds per module (set-up, call and teardown of its tests) from pytest's JUnit XML."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        classname = case.get("classname") or ""
        parts = classname.split(".")
        # "tests.test_x" or "tests.test_x.TestClass": the module is the dotted path up to the test_ part
        upto = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        totals["/".join(parts[:upto + 1]) + ".py"] += float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(totals.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/module_order.py RUN.xml  (a pytest --junitxml file of a whole run)")
    found = seconds_from_junit(Path(sys.argv[1]))
    SECONDS_FILE.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(found)} modules, {sum(found.values()) / 60:.1f} min of tests, to {SECONDS_FILE}")
