"""The tool server of `calc_env`: run by verifiers as `python -m calc_env.tools` (an MCP server)."""

import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers and return the sum."""
        return str(a + b)


if __name__ == "__main__":
    CalcToolset.run()
