"""Deploying task apps: to Modal (`deploy`, `modal-serve`) or locally under uvicorn (`deploy --runtime uvicorn`).

- `flow`           the command flow: entry → env files → plan → generated source → `modal deploy|serve` → URL,
                   saved as `TASK_APP_URL` in the env file
- `modal_script`   the plan (`ModalPlan`) and the generated Modal app source
- `modal_cli`      finding and running the `modal` CLI under a deadline; reading the deployed URL
- `modal_runtime`  what the container runs: the task app's FastAPI app
- `entries`        finding the entry; the uvicorn runtime
"""
