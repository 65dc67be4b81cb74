"""The task apps that ship inside the package: `math-single-step` (`math/`), `color-quiz` (`colors/`) and
`grpo-crafter-task-app` (`crafter/`), with their data files.

They live here, not in the checkout's `examples/`, so that an installed wheel (`pip install`, `uvx --from`) can
`serve`, `eval` and `demo` them from any folder. Each app is a directory whose `task_app.py` registers it; discovery
finds them by reading the files (`synth_ai.taskapp.discovery`) and imports only the one a command names, by path,
so nothing here is imported as `synth_ai.bundled_apps.<app>`.
"""

from __future__ import annotations

from pathlib import Path

APPS_DIR = Path(__file__).resolve().parent
