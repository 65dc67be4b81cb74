"""The RL workflow page's legacy script, kept so its command still works: it is `synth-ai train --type rl`.

    BACKEND_BASE_URL=https://<backend>/api SYNTH_API_KEY=<key> TASK_APP_URL=https://<task-app>.modal.run \
    uv run python examples/warming_up_to_rl/run_rl_and_save.py --config examples/warming_up_to_rl/configs/rl_from_ft.toml

`train` reads the same inputs: BACKEND_BASE_URL, SYNTH_API_KEY, TASK_APP_URL (or --task-url, then
[services].task_url), validates [model] (exactly one of source / base) and posts the whole config under
`data.config` to /rl/jobs. Every other `train` flag (--no-poll, --dry-run, ...) is passed through.
"""

from __future__ import annotations

import sys

from synth_ai.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["train", "--type", "rl", *sys.argv[1:]]))
