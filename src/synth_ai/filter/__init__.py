"""`synth-ai filter`: turn traced sessions into an SFT dataset.

- `options`  `FilterOptions` from a validated `[filter]` config
- `rules`    the selection rules (split, task id, model, created_at window, official and judge scores, errored)
- `records`  stored messages -> `{"messages": [user, assistant], "metadata": {...}}` records
- `writer`   the atomic JSONL writer
- `flow`     `run_filter`: one streaming pass from the trace database to the output file
"""
