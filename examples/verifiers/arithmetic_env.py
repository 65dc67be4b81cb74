"""A verifiers environment (the v1 API of verifiers 0.4.0) small enough to train on a laptop CPU:
one arithmetic question per task, answered in one turn. Serve it as a synth-ai task app with

    synth-ai serve verifiers:examples/verifiers/arithmetic_env.py --port 8103

(docs/verifiers.md walks through serve, eval and RL). `num_tasks` and `split` are its config fields:
`--env-args '{"num_tasks": 50}'`.
"""

import random
import re

import verifiers.v1 as vf


class ArithmeticData(vf.TaskData):
    answer: str = ""


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the last number of the reply is the answer."""
        return 1.0 if last_number(trace) == int(self.data.answer) else 0.0

    @vf.reward(weight=0.5)
    async def close(self, trace: vf.Trace) -> float:
        """Partial credit for a number near the answer (1 at the answer, 0 at 10 or more away, or no number): a group
        of samples then usually differs, which GSPO needs to learn anything."""
        guess = last_number(trace)
        return 0.0 if guess is None else max(0.0, 1.0 - abs(guess - int(self.data.answer)) / 10)


def last_number(trace: vf.Trace) -> int | None:
    sampled = [node for node in trace.nodes if node.sampled]
    numbers = re.findall(r"-?\d+", (sampled[-1].message.content or "") if sampled else "")
    return int(numbers[-1]) if numbers else None


class ArithmeticConfig(vf.TasksetConfig):
    num_tasks: int = 20
    split: str = "train"


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticConfig]):
    def load(self):
        rng = random.Random(0 if self.config.split == "train" else 1)
        tasks = []
        for index in range(self.config.num_tasks):
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            tasks.append(ArithmeticTask(
                ArithmeticData(id=f"{self.config.split}-{index}", prompt=f"What is {a} + {b}? Answer with the number.",
                               answer=str(a + b)),
                self.config.task))
        return tasks


__all__ = ["ArithmeticTaskset"]
