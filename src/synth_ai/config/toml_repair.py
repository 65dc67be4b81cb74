"""Reading `{ "image": 1 }` as `{ "image" = 1 }`: the product docs' Qwen3-VL checklist writes inline tables
JSON-style, which is not TOML. A file that fails to parse only because of that is read with the colons taken as
`=`, and each line so read gets a warning (other TOML tools still reject it). Nothing else is ever rewritten:
strings, comments, arrays and time values (`07:32:00`) are left alone.
"""

from __future__ import annotations


def colons_as_equals(text: str) -> tuple[str, list[int]]:
    """`text` with every `key: value` inside an inline table turned into `key = value`, and the 1-based lines
    that changed (empty when there was nothing to change)."""
    out: list[str] = []
    stack: list[str] = []  # open "{" / "[" containers of the current value
    key_done = False  # inside the innermost inline table, the current entry already has its `=`
    quote: str | None = None
    changed: set[int] = set()
    line = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            if len(quote) == 1 and c == "\\" and quote == '"':
                out.append(text[i:i + 2])
                line += text[i:i + 2].count("\n")
                i += 2
                continue
            if text.startswith(quote, i):
                out.append(quote)
                i += len(quote)
                quote = None
                continue
            line += c == "\n"
            out.append(c)
            i += 1
            continue
        if text.startswith(('"""', "'''"), i):
            quote = text[i:i + 3]
            out.append(quote)
            i += 3
            continue
        if c in "\"'":
            quote = c
        elif c == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(text[i:end])
            i = end
            continue
        elif c == "\n":
            line += 1
        elif c in "{[":
            stack.append(c)
            key_done = c == "["
        elif c in "}]":
            if stack:
                stack.pop()
            key_done = True
        elif c == "," and stack and stack[-1] == "{":
            key_done = False
        elif c == "=" and stack and stack[-1] == "{":
            key_done = True
        elif c == ":" and stack and stack[-1] == "{" and not key_done:
            out.append(" =" if i and text[i - 1] not in " \t" else "=")
            key_done = True
            changed.add(line)
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out), sorted(changed)
