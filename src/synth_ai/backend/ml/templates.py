"""Chat templates for the Qwen3 and Qwen3-VL families, with generation markers for assistant-only loss.

The rendered text follows Qwen's ChatML conventions exactly (so a real Qwen3 / Qwen3-VL checkpoint sees the format
it was trained on): `<|im_start|>role\\n...<|im_end|>\\n` turns, tools listed as JSON lines inside `<tools>` in the
system turn, assistant tool calls as `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, tool results as
`<tool_response>` blocks inside a user turn, reasoning as a `<think>...</think>` block, images as
`<|vision_start|><|image_pad|><|vision_end|>`.

Differences from the templates shipped with the checkpoints, all for training:
- everything an assistant turn produces (reasoning, text, tool calls, the closing `<|im_end|>`) sits between
  `{% generation %}` markers, so `return_assistant_tokens_mask=True` marks exactly the tokens the loss is taken on;
- every assistant turn keeps its reasoning (the stock Qwen3 template drops it from turns before the last user
  query), which makes the rendering prefix-preserving: appending a message never changes earlier text;
- the Qwen3 variant always writes a think block (empty when there is no reasoning), as Qwen3's hybrid-thinking
  models do in no-think mode; the Qwen3-VL (Instruct) variant writes one only when a turn has reasoning.

Templates are Python strings (not package data files) so they ship with the code without packaging rules.
"""

from __future__ import annotations

_TOOLS_PREAMBLE = (
    "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
)
_TOOLS_POSTAMBLE = (
    "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n"
)

_TEMPLATE = r"""{#- synth-ai chat template, __FAMILY__ family. Assistant output is inside generation markers. -#}
{%- set always_think = __ALWAYS_THINK__ %}
{%- set with_images = __WITH_IMAGES__ %}
{%- macro part_text(content) -%}
  {%- if content is none -%}
  {%- elif content is string -%}{{- content -}}
  {%- elif content is mapping -%}{{- part_text([content]) -}}
  {%- else -%}
    {%- for part in content -%}
      {%- if part is string -%}{{- part -}}
      {%- elif part.type is defined and part.type == 'text' -%}{{- part.text -}}
      {%- elif part.type is defined and part.type in ['image', 'image_url'] -%}
        {%- if with_images -%}<|vision_start|><|image_pad|><|vision_end|>{%- endif -%}
      {%- elif part.text is defined -%}{{- part.text -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' %}
{%- if tools %}
  {{- '<|im_start|>system\n' }}
  {%- if has_system %}{{- part_text(messages[0].content) + '\n\n' }}{%- endif %}
  {{- "__TOOLS_PREAMBLE__" }}
  {%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
  {{- "__TOOLS_POSTAMBLE__" }}
{%- elif has_system %}
  {{- '<|im_start|>system\n' + part_text(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if loop.first and message.role == 'system' %}
  {%- elif message.role == 'user' or message.role == 'system' %}
    {{- '<|im_start|>' + message.role + '\n' + part_text(message.content) + '<|im_end|>\n' }}
  {%- elif message.role == 'assistant' %}
    {%- set text = part_text(message.content) %}
    {%- set reasoning = '' %}
    {%- if message.reasoning_content is defined and message.reasoning_content is string %}
      {%- set reasoning = message.reasoning_content %}
    {%- elif '</think>' in text %}
      {%- set reasoning = text.split('</think>')[0].split('<think>')[-1] %}
      {%- set text = text.split('</think>')[-1] %}
    {%- endif %}
    {{- '<|im_start|>assistant\n' }}
    {%- generation %}
      {%- if always_think or reasoning.strip() %}
        {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}
      {%- endif %}
      {{- text.lstrip('\n') }}
      {%- if message.tool_calls is defined and message.tool_calls %}
        {%- for call in message.tool_calls %}
          {%- if call.function is defined %}{%- set fn = call.function %}{%- else %}{%- set fn = call %}{%- endif %}
          {%- if not loop.first or text.strip() %}{{- '\n' }}{%- endif %}
          {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' }}
          {%- if fn.arguments is string %}{{- fn.arguments }}
          {%- elif fn.arguments is defined and fn.arguments is not none %}{{- fn.arguments | tojson }}
          {%- else %}{{- '{}' }}{%- endif %}
          {{- '}\n</tool_call>' }}
        {%- endfor %}
      {%- endif %}
      {{- '<|im_end|>' }}
    {%- endgeneration %}
    {{- '\n' }}
  {%- elif message.role == 'tool' %}
    {%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
    {{- '\n<tool_response>\n' + part_text(message.content) + '\n</tool_response>' }}
    {%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
  {{- '<|im_start|>assistant\n' }}
  {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""


def _render(family: str, *, always_think: bool, with_images: bool) -> str:
    return (
        _TEMPLATE.replace("__FAMILY__", family)
        .replace("__ALWAYS_THINK__", "true" if always_think else "false")
        .replace("__WITH_IMAGES__", "true" if with_images else "false")
        .replace("__TOOLS_PREAMBLE__", _TOOLS_PREAMBLE)
        .replace("__TOOLS_POSTAMBLE__", _TOOLS_POSTAMBLE)
    )


QWEN3_TRAINING_TEMPLATE = _render("Qwen3", always_think=True, with_images=False)
QWEN3_VL_TRAINING_TEMPLATE = _render("Qwen3-VL", always_think=False, with_images=True)


def training_template(vision: bool) -> str:
    """The template the SFT trainer renders records with (for tiny and real checkpoints alike)."""
    return QWEN3_VL_TRAINING_TEMPLATE if vision else QWEN3_TRAINING_TEMPLATE
