"""KeyLocator: from a TOML key path back to the line that wrote it, through the shapes TOML allows."""

from __future__ import annotations

import tomllib

import pytest

from synth_ai.config.toml_source import KeyLocator, format_key_path

TEXT = '''\
# comment [not.a.table]
title = "x"                      # 2
[algorithm]                      # 3
type = "online"                  # 4
"quoted key" = 1                 # 5
a.b.c = 2                        # 6
[ spaced . "dot.ted" ]           # 7
k = 1                            # 8
[[eval.judges]]                  # 9
module = "m1"                    # 10
[[eval.judges]]                  # 11
module = "m2"                    # 12
[arrays]                         # 13
nested = [                       # 14
  [1, 2],
  [3, 4]
]
after_nested = 1                 # 18
strings = [                      # 19
  "a ] b", 'c [ d',  # ] a comment with a bracket
  "e \\" ] f",
]
after_strings = 1                # 23
[prompts]                        # 24
system = """                     # 25
[training]
batch_size = 1
"""
literal = \'\'\'
[training] \'\'\'
one_line = """[x] = 1"""         # 31
after_prompts = 1                # 32
[training]                       # 33
batch_size = true                # 34
inline = { r = 0, s = [1,        2] }  # 35
'''


@pytest.fixture(scope="module")
def locator() -> KeyLocator:
    tomllib.loads(TEXT)  # the fixture is valid TOML
    return KeyLocator.scan(TEXT)


@pytest.mark.parametrize("path,line", [
    (("title",), 2),
    (("algorithm",), 3),
    (("algorithm", "type"), 4),
    (("algorithm", "quoted key"), 5),
    (("algorithm", "a", "b", "c"), 6),
    (("spaced", "dot.ted", "k"), 8),
    (("eval", "judges"), 9),
    (("eval", "judges", 1, "module"), 10),  # arrays of tables: the first entry (best effort)
    (("arrays", "nested"), 14),
    (("arrays", "after_nested"), 18),
    (("arrays", "strings"), 19),
    (("arrays", "after_strings"), 23),
    (("prompts", "system"), 25),
    (("prompts", "one_line"), 31),
    (("prompts", "after_prompts"), 32),
    (("training",), 33),
    (("training", "batch_size"), 34),
    (("training", "inline", "r"), 35),  # inside an inline table: the table's line
    (("training", "missing_key"), 33),  # an absent key: its table's line
    (("nowhere", "x"), None),
])
def test_line_of(locator: KeyLocator, path, line):
    assert locator.line_of(path) == line


def test_text_inside_multiline_values_is_not_a_key(locator: KeyLocator):
    assert ("1, 2",) not in locator.lines and ("1",) not in locator.lines
    assert locator.lines[("training",)] == 33 and locator.lines[("training", "batch_size")] == 34
    assert ("prompts", "batch_size") not in locator.lines


def test_crlf_line_endings():
    text = "[training]\r\nbatch_size = 1\r\nlr = 2\r\n"
    assert KeyLocator.scan(text).line_of(("training", "lr")) == 3


@pytest.mark.parametrize("path,text", [
    (("training", "batch_size"), "[training].batch_size"),
    (("training", "weight_sync", "mode"), "[training.weight_sync].mode"),
    (("evaluation", "seeds", 2), "[evaluation].seeds[2]"),
    (("training",), "[training]"),
    (("app_id",), "app_id"),
    (("eval", "judges", 0, "module"), "[eval.judges[0]].module"),
    (("filter", "min_judge_scores", "quality"), "[filter.min_judge_scores].quality"),
])
def test_format_key_path(path, text):
    assert format_key_path(path) == text
