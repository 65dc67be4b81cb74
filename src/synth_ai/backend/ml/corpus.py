"""A deterministic synthetic chat corpus for the tiny models (tokenizer training and brief LM pretraining).

Conversations in OpenAI message format, covering what the tiny models should know the *shape* of: short Q&A,
copying, arithmetic, reasoning in `<think>` blocks, tool calls with tool results, and (for the VL model) short
captions of simple generated pictures. Pure Python; `random.Random(seed)` only, so the same seed always gives the
same corpus.
"""

from __future__ import annotations

import json
import random
from typing import Any

NAMES = ["Ada", "Bob", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivy", "Jon", "Kai", "Lea", "Max", "Nia",
         "Omar", "Pia", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Vic", "Wes", "Xena", "Yuri", "Zoe"]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Rome", "Quito", "Seoul", "Berlin", "Madrid",
          "Nairobi", "Austin", "Dublin", "Hanoi", "Perth"]
COLORS = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple"]
SHAPES = ["square", "circle", "triangle", "stripe"]
OBJECTS = {"sky": "blue", "grass": "green", "snow": "white", "sun": "yellow", "coal": "black",
           "blood": "red", "orange": "orange", "plum": "purple", "leaf": "green", "sea": "blue"}
ANIMALS = ["cat", "dog", "fox", "owl", "bear", "fish", "frog", "wolf", "duck", "goat"]
FOODS = ["apple", "bread", "rice", "soup", "cake", "egg", "pear", "milk", "corn", "tea"]
VERBS = ["runs", "jumps", "sleeps", "eats", "swims", "reads", "sings", "walks", "waits", "plays"]
ADJS = ["small", "big", "fast", "slow", "happy", "quiet", "old", "young", "brave", "calm"]
WEATHER = ["sunny", "rainy", "cloudy", "windy", "snowy", "foggy"]
SYSTEMS = ["You are a helpful assistant.", "You are a concise assistant.", "Answer briefly.",
           "You are a friendly guide.", "You help with simple questions."]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search notes for a word.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def _sentence(rng: random.Random) -> str:
    return f"The {rng.choice(ADJS)} {rng.choice(ANIMALS)} {rng.choice(VERBS)}."


def _with_system(rng: random.Random, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if rng.random() < 0.4:
        return [{"role": "system", "content": rng.choice(SYSTEMS)}, *messages]
    return messages


def conversation(rng: random.Random) -> dict[str, Any]:
    """One synthetic text conversation: {"messages": [...], "tools": [...]?}."""
    kind = rng.randrange(9)
    if kind == 0:
        a, b = rng.randrange(50), rng.randrange(50)
        msgs = [{"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"The answer is {a + b}."}]
    elif kind == 1:
        obj = rng.choice(list(OBJECTS))
        msgs = [{"role": "user", "content": f"What color is the {obj}?"},
                {"role": "assistant", "content": f"The {obj} is {OBJECTS[obj]}."}]
    elif kind == 2:
        words = " ".join(rng.choice(ANIMALS + FOODS + COLORS) for _ in range(rng.randint(2, 6)))
        msgs = [{"role": "user", "content": f"Repeat after me: {words}"},
                {"role": "assistant", "content": words}]
    elif kind == 3:
        name = rng.choice(NAMES)
        msgs = [{"role": "user", "content": f"Hello, I am {name}."},
                {"role": "assistant", "content": f"Nice to meet you, {name}! How can I help?"}]
    elif kind == 4:
        city = rng.choice(CITIES)
        sky, temp = rng.choice(WEATHER), rng.randint(-5, 35)
        msgs = [{"role": "user", "content": f"What is the weather in {city}?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"sky": sky, "temp": temp})},
                {"role": "assistant", "content": f"It is {sky} and {temp} degrees in {city}."}]
        msgs = _with_system(rng, msgs)  # before the tool count: the order of draws is part of the recipe
        return {"messages": msgs, "tools": [WEATHER_TOOL, ADD_TOOL, SEARCH_TOOL][: rng.randint(1, 3)]}
    elif kind == 5:
        a, b = rng.randrange(100), rng.randrange(100)
        msgs = [{"role": "user", "content": f"Use the tool to add {a} and {b}."},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                 "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": str(a + b)},
                {"role": "assistant", "content": f"The sum is {a + b}."}]
        return {"messages": _with_system(rng, msgs), "tools": [ADD_TOOL, WEATHER_TOOL][: rng.randint(1, 2)]}
    elif kind == 6:
        a, b = rng.randrange(10), rng.randrange(10)
        msgs = [{"role": "user", "content": f"Think first: what is {a} times {b}?"},
                {"role": "assistant", "reasoning_content": f"{a} times {b} means adding {a} to itself {b} times. "
                 f"That gives {a * b}.", "content": f"{a * b}"}]
    elif kind == 7:
        picks = rng.sample(FOODS, 3)
        msgs = [{"role": "user", "content": f"List three foods that {rng.choice(NAMES)} likes."},
                {"role": "assistant", "content": f"{picks[0]}, {picks[1]} and {picks[2]}."}]
    else:
        story = " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))
        msgs = [{"role": "user", "content": f"Tell me a short story about a {rng.choice(ANIMALS)}."},
                {"role": "assistant", "content": story}]
    return {"messages": _with_system(rng, msgs)}


def picture(rng: random.Random, size: int = 64) -> tuple[Any, str]:
    """A simple generated picture and its caption (Pillow)."""
    from PIL import Image, ImageDraw

    background, color = rng.sample(COLORS, 2)
    shape = rng.choice(SHAPES)
    rgb = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40),
           "black": (10, 10, 10), "white": (245, 245, 245), "orange": (250, 140, 20), "purple": (130, 40, 170)}
    image = Image.new("RGB", (size, size), rgb[background])
    draw = ImageDraw.Draw(image)
    lo, hi = size // 5, size - size // 5
    if shape == "square":
        draw.rectangle([lo, lo, hi, hi], fill=rgb[color])
    elif shape == "circle":
        draw.ellipse([lo, lo, hi, hi], fill=rgb[color])
    elif shape == "triangle":
        draw.polygon([(size // 2, lo), (lo, hi), (hi, hi)], fill=rgb[color])
    else:
        draw.rectangle([0, size // 2 - size // 8, size, size // 2 + size // 8], fill=rgb[color])
    return image, f"A {color} {shape} on a {background} background."


def vision_conversation(rng: random.Random, image_part: dict[str, Any], caption: str) -> dict[str, Any]:
    question = rng.choice(["What is in the picture?", "Describe the image.", "What do you see?"])
    return {"messages": [
        {"role": "user", "content": [image_part, {"type": "text", "text": question}]},
        {"role": "assistant", "content": caption},
    ]}


# Prose over a made-up lexicon: enough distinct words (Zipf-distributed, like natural text) for a BPE vocabulary
# of tens of thousands of tokens, which the small English word lists above cannot fill.
_ONSETS = ["", "b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "pl", "qu",
           "r", "s", "sh", "sl", "st", "t", "th", "tr", "v", "w", "y", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "oa", "y"]
_CODAS = ["", "", "", "n", "r", "s", "l", "m", "nd", "st", "rk", "th", "ng", "x", "t", "ck"]


def lexicon(seed: int, size: int) -> list[str]:
    """`size` distinct made-up words of 1 to 4 syllables, in the order a Zipf sampler ranks them."""
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        syllables = rng.choices((1, 2, 3, 4), weights=(3, 5, 3, 1))[0]
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Prose:
    """Sentences of words drawn from a lexicon with Zipf weights (rank^-1.05), plus occasional numbers."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(words))]
        total = 0.0
        self._cumulative = []
        for weight in weights:
            total += weight
            self._cumulative.append(total)

    def sentence(self, rng: random.Random) -> str:
        count = rng.randint(5, 16)
        picked = rng.choices(self.words, cum_weights=self._cumulative, k=count)
        if rng.random() < 0.15:
            picked.insert(rng.randrange(count), str(rng.randrange(1000)))
        text = " ".join(picked)
        return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "?", "!", ";", ","])

    def paragraph(self, rng: random.Random, words: int) -> str:
        """Sentences until the paragraph holds about `words` words."""
        out: list[str] = []
        count = 0
        while count < words:
            sentence = self.sentence(rng)
            out.append(sentence)
            count += sentence.count(" ") + 1
        return " ".join(out)
