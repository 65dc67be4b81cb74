"""The rules for a record's `tools` list and a message's `tool_calls`, and their normalised form."""

from __future__ import annotations

from synth_ai.lean_json import loads as _loads

TYPE_CHECKING = False  # `typing` is not loaded at run time (the `files validate` start-up: see record_types)
if TYPE_CHECKING:
    from typing import Any

from synth_ai.datasets.checking import RuleContext, type_name


def check_tool_call(call: Any, i: int, j: int, ctx: RuleContext) -> dict[str, Any] | None:
    where = f"message {i} tool_call {j}"
    if not isinstance(call, dict):
        ctx.error(f"{where} is not an object (found {type_name(call)})")
        return None
    fn = call.get("function")
    name: Any = None
    arguments: Any = None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        name, arguments = fn["name"], fn.get("arguments")
    elif isinstance(call.get("name"), str):
        name, arguments = call["name"], call.get("arguments")
    if not isinstance(name, str) or not name.strip():
        ctx.error(f"{where} missing function name (expected function.name or name)")
        return None
    ctx.res.text_chars += len(name)
    if arguments is None:
        arguments = {}
    elif isinstance(arguments, str):
        ctx.res.text_chars += len(arguments)
        if arguments.strip():
            try:
                arguments = _loads(arguments)
            except (ValueError, RecursionError) as exc:
                msg = exc.msg if hasattr(exc, "colno") else str(exc)  # json's JSONDecodeError: its bare message
                ctx.error(f"{where}: arguments string is not valid JSON ({msg})")
                return None
        else:
            arguments = {}
        if not isinstance(arguments, dict):
            ctx.error(f"{where}: arguments must decode to a JSON object (found {type_name(arguments)})")
            return None
    elif not isinstance(arguments, dict):
        ctx.error(f"{where}: arguments must be an object or a JSON string (found {type_name(arguments)})")
        return None
    if not ctx.normalize:
        return None
    out: dict[str, Any] = {}
    if call.get("id") is not None:
        out["id"] = str(call["id"])
    out["type"] = "function"
    out["function"] = {"name": name, "arguments": arguments}
    return out


def check_tools(tools: Any, ctx: RuleContext) -> list[Any]:
    if not isinstance(tools, list):
        ctx.error(f"tools must be provided as a list when present (found {type_name(tools)})")
        return []
    out: list[Any] = []
    for k, tool in enumerate(tools):
        where = f"tool {k}"
        if not isinstance(tool, dict):
            ctx.error(f"{where} is not an object (found {type_name(tool)})")
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            ctx.error(f"{where} missing name (expected a non-empty string)")
            continue
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            ctx.error(f"{where} description must be a string if present (found {type_name(description)})")
            continue
        parameters = spec.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            ctx.error(f"{where} parameters must be an object if present (found {type_name(parameters)})")
            continue
        fn: dict[str, Any] = {"name": name}
        if description is not None:
            fn["description"] = description
        if parameters is not None:
            fn["parameters"] = parameters
        out.append({"type": "function", "function": fn})
    return out
