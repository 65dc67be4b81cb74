"""`synth-ai setup`: getting keys (the hosted device-code handshake, or local keys for the embedded backend) and
saving them to `./.env` and `~/.synth-ai/config.json`.

- `handshake`   the device-code exchange with the Synth website (origin, init, polling, typed errors)
- `local_keys`  keys for the embedded backend and for task apps, created or reused, registered with the backend
- `credentials` where keys are saved: the `.env` file and `config.json`
- `flow`        the command's orchestration and what it prints
"""
