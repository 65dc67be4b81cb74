"""A verifiers environment whose rows come from a Hugging Face Hub dataset: served offline (HF_DATASETS_OFFLINE=1,
HF_HUB_OFFLINE=1, an empty cache), loading it must fail with a message naming the dataset and the fix."""

import verifiers.v1 as vf

DATASET = "some-org/some-dataset"


class HubTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self):
        import datasets

        rows = datasets.load_dataset(DATASET, split="train")
        return [vf.Task(vf.TaskData(prompt=row["question"]), self.config.task) for row in rows]


__all__ = ["HubTaskset"]
