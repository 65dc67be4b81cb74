"""GSPO reinforcement learning against a live task app (`run_rl`, called by the job worker for RL jobs).

Modules: `rl_settings` (the job payload read into RLSettings), `types` (rollouts and samples), `rollouts` (task-app
calls, retries, error accounting), `advantages` (episode rewards, returns, group normalisation), `step_rewards`
(per-turn rewards), `judge` (the LLM judge), `reward_report` (their per-iteration numbers), `batches` (recorded
tokens to tensors, log-probs), `gspo` (the loss), `step` (the policy: updates, checkpoints, final model), `loop`
(the iterations), `iteration_report` (what an iteration reports), `data_parallel` (the ranks of a torchrun job),
`topology` (`[topology]` -> each rank's devices). The rollout engine lives in
`synth_ai.backend.inference.policy_server`.
"""

from synth_ai.backend.trainers.rl.loop import run_rl

__all__ = ["run_rl"]
