"""Experiment trackers (Weights & Biases, TensorBoard, MLflow) for jobs and evals: what the `[logging]` table asks
for (`settings`), one writer per tracker (`wandb_sink`, `tensorboard_sink`, `mlflow_sink`), the fan-out that keeps
a tracker's failure away from the run (`tracker`), rollout sample tables carried in events (`tables`) and the
resolved config with its secrets masked (`public_config`). Every tracker library is imported lazily, only when a
run reports to it. docs/tracking.md is the user's view."""
