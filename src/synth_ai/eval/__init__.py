"""`synth-ai eval`: run a model over a task app's seeds, score each rollout, store the traces.

- `settings`   flags + TOML → one `EvalSettings` (config discovery, precedence flag > TOML > default)
- `policy`     where the task app sends its chat completions (`inference_url`), and the `/rollout` body
- `apps`       the task app to call: discovered and run in-process (ASGI, no port) or at `--url`
- `seeds`      `--metadata` / `--metadata-sql` seed selection from the app's `/task_info`
- `judges`     `[eval.judge]` / `[[eval.judges]]` callables, loaded from modules or files
- `scoring`    official score, outcome, judge scores, means and Pearson r
- `traces`     a finished rollout → a traces v3 session (one transaction per seed)
- `runner`     seeds concurrently with per-seed timeouts; errors are errors, never zeros
- `report`     the summary (table or one JSON document)
"""
