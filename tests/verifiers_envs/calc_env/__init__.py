"""A multi-turn verifiers environment with a tool (the v1 API of verifiers 0.4.0): the model may call `calc_add`
(served by `calc_env.tools` over MCP) before it answers; the reward checks the final answer and that the tool was
used. The tests serve it as `verifiers:<this directory>`."""

import verifiers.v1 as vf

from calc_env.tools import CalcToolset

PROBLEMS = [(2, 3), (4, 5), (10, 7)]


class CalcData(vf.TaskData):
    answer: str = ""


class CalcTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CalcTask(vf.Task[CalcData, vf.State, CalcTaskConfig]):
    @classmethod
    def toolsets(cls, config: CalcTaskConfig) -> list[vf.Toolset]:
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        sampled = [node for node in trace.nodes if node.sampled]
        reply = (sampled[-1].message.content or "") if sampled else ""
        return 1.0 if self.data.answer in reply else 0.0

    @vf.reward(weight=0.25)
    async def used_tool(self, trace: vf.Trace) -> float:
        return 1.0 if any(node.message.role == "tool" for node in trace.nodes) else 0.0


class CalcConfig(vf.TasksetConfig):
    task: CalcTaskConfig = CalcTaskConfig()


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self):
        return [CalcTask(CalcData(prompt=f"Use the calc_add tool to add {a} and {b}, then say the sum.",
                                  answer=str(a + b)), self.config.task) for a, b in PROBLEMS]


__all__ = ["CalcTaskset"]
