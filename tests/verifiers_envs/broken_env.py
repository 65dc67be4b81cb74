"""A verifiers environment whose taskset cannot load its rows: the tests check that serving it fails with the
taskset's own message (and its traceback only under SYNTH_DEBUG=1)."""

import verifiers.v1 as vf


class BrokenTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self):
        raise RuntimeError("the rows table 'qa_rows' is missing")


__all__ = ["BrokenTaskset"]
