"""A single-turn question/answer verifiers environment (the v1 API of verifiers 0.4.0) with an in-memory dataset:
the tests serve it as `verifiers:<this file>`. Two reward functions: `correct` (weight 1) and `brief` (weight 0.5);
a `split` field selects the train or test rows; `fail_reward_on` makes the `correct` reward raise for one answer."""

import verifiers.v1 as vf

ROWS = {
    "train": [("What is 2 + 2?", "4"), ("What is 3 + 5?", "8"), ("What is 10 - 3?", "7"), ("What is 6 / 2?", "3")],
    "test": [("What is 1 + 1?", "2"), ("What is 9 - 4?", "5")],
}


class QAData(vf.TaskData):
    answer: str = ""


class QAConfig(vf.TasksetConfig):
    split: str = "train"
    limit: int = 100
    fail_reward_on: str = ""


class QATask(vf.Task[QAData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        reply = final_reply(trace)
        if self.data.answer == QATASK_FAILS.get("answer"):
            raise RuntimeError(f"the grader broke on answer {self.data.answer}")
        return 1.0 if self.data.answer in reply else 0.0

    @vf.reward(weight=0.5)
    async def brief(self, trace: vf.Trace) -> float:
        return 1.0 if len(final_reply(trace)) <= 40 else 0.0


QATASK_FAILS: dict[str, str] = {}


def final_reply(trace: vf.Trace) -> str:
    sampled = [node for node in trace.nodes if node.sampled]
    return (sampled[-1].message.content or "") if sampled else ""


class QATaskset(vf.Taskset[QATask, QAConfig]):
    def load(self):
        if self.config.fail_reward_on:
            QATASK_FAILS["answer"] = self.config.fail_reward_on
        rows = ROWS[self.config.split][: self.config.limit]
        return [QATask(QAData(prompt=question, answer=answer, id=f"{self.config.split}-{i}"), self.config.task)
                for i, (question, answer) in enumerate(rows)]


__all__ = ["QATaskset"]
