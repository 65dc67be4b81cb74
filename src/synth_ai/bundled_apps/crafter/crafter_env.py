"""Crafter for language models: one seeded episode, its text observation, its frame as a PNG, its achievements.

This module knows nothing of HTTP or of the task-app SDK; `task_app.py` drives it. Everything here is
deterministic for a given seed and action sequence (crafter seeds its world from `(seed, episode)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACTION_NAMES: tuple[str, ...] = (
    "noop", "move_left", "move_right", "move_up", "move_down", "do", "sleep", "place_stone", "place_table",
    "place_furnace", "place_plant", "make_wood_pickaxe", "make_stone_pickaxe", "make_iron_pickaxe",
    "make_wood_sword", "make_stone_sword", "make_iron_sword",
)

# Names a model commonly uses for an action; mapped before validation.
ACTION_ALIASES: dict[str, str] = {
    "left": "move_left", "right": "move_right", "up": "move_up", "down": "move_down",
    "interact": "do", "use": "do", "collect": "do", "attack": "do", "rest": "sleep",
    **{f"craft_{tool}": f"make_{tool}" for tool in (
        "wood_pickaxe", "stone_pickaxe", "iron_pickaxe", "wood_sword", "stone_sword", "iron_sword")},
}

ACHIEVEMENTS: tuple[str, ...] = (
    "collect_coal", "collect_diamond", "collect_drink", "collect_iron", "collect_sapling", "collect_stone",
    "collect_wood", "defeat_skeleton", "defeat_zombie", "eat_cow", "eat_plant", "make_iron_pickaxe",
    "make_iron_sword", "make_stone_pickaxe", "make_stone_sword", "make_wood_pickaxe", "make_wood_sword",
    "place_furnace", "place_plant", "place_stone", "place_table", "wake_up",
)

VITALS: tuple[str, ...] = ("health", "food", "drink", "energy")

# Cells that are background: listed in the grid, left out of the "nearby" summary.
_BACKGROUND = frozenset({"grass", "sand", "path", "none", "unknown"})

_DIRECTIONS = {(-1, 0): "left", (1, 0): "right", (0, -1): "up", (0, 1): "down"}

DEFAULT_AREA = (64, 64)
DEFAULT_LENGTH = 10000
DEFAULT_IMAGE_SIZE = 64
MAX_IMAGE_SIZE = 1024
MAX_AREA_SIDE = 256  # world generation is pure Python per cell: 256x256 already takes ~15 s on one core


def normalise_action(name: Any) -> str | None:
    """The canonical action name for `name`, or None when it is not a Crafter action."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace(" ", "_").replace("-", "_")
    key = ACTION_ALIASES.get(key, key)
    return key if key in ACTION_NAMES else None


def parse_image_size(value: Any) -> tuple[int, int]:
    """`image_size` from the env config: an int (square) or a pair [width, height]."""
    if value is None:
        return (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    if isinstance(value, bool):
        raise ValueError(f"image_size must be an integer or [width, height], not {value!r}")
    try:
        if isinstance(value, (int, float, str)):
            width = height = int(value)
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            width, height = int(value[0]), int(value[1])
        else:
            raise ValueError(f"image_size must be an integer or [width, height], not {value!r}")
    except (TypeError, OverflowError):
        raise ValueError(f"image_size must be an integer or [width, height], not {value!r}") from None
    for side in (width, height):
        if not 16 <= side <= MAX_IMAGE_SIZE:
            raise ValueError(f"image_size sides must be between 16 and {MAX_IMAGE_SIZE}, got {side}")
    return (width, height)


@dataclass(frozen=True)
class EpisodeConfig:
    seed: int
    area: tuple[int, int] = DEFAULT_AREA
    length: int = DEFAULT_LENGTH
    image_size: tuple[int, int] = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)

    @classmethod
    def from_request(cls, seed: Any, config: dict[str, Any] | None, *, default_seed: int = 0) -> EpisodeConfig:
        config = config or {}
        raw_seed = seed if seed is not None else config.get("seed", default_seed)
        area = config.get("area", DEFAULT_AREA)
        if not (isinstance(area, (list, tuple)) and len(area) == 2):
            raise ValueError(f"area must be [width, height], not {area!r}")
        try:
            length = int(config.get("length", DEFAULT_LENGTH))
            seed_value = int(raw_seed)
            sides = (int(area[0]), int(area[1]))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"seed, length and area must be integers ({exc})") from None
        if length < 1:
            raise ValueError(f"length must be at least 1, got {length}")
        for side in sides:
            if not 1 <= side <= MAX_AREA_SIDE:
                raise ValueError(f"area sides must be between 1 and {MAX_AREA_SIDE}, got {side}")
        return cls(
            seed=seed_value,
            area=sides,
            length=length,
            image_size=parse_image_size(config.get("image_size")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "area": list(self.area), "length": self.length,
                "image_size": list(self.image_size)}


@dataclass
class ActionResult:
    action: str
    crafter_reward: float
    unlocked: list[str]
    done: bool


@dataclass
class CrafterEpisode:
    """One Crafter episode. `reset()` generates the world (about a second); `act()` steps it."""

    config: EpisodeConfig
    env: Any = None
    frame: Any = None
    steps: int = 0
    done: bool = False
    unlocked: list[str] = field(default_factory=list)  # in the order they were first achieved
    _info: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        import crafter

        self.env = crafter.Env(area=self.config.area, length=self.config.length, size=self.config.image_size,
                               seed=self.config.seed)
        self.frame = self.env.reset()
        self.steps = 0
        self.done = False
        self.unlocked = []
        player = self.env._player
        self._info = {"inventory": dict(player.inventory), "achievements": dict(player.achievements),
                      "player_pos": player.pos}

    def act(self, action: str) -> ActionResult:
        """Step the world with one named action; report the achievements it unlocked for the first time."""
        if self.env is None:
            raise RuntimeError("reset() the episode before acting")
        if self.done:
            raise RuntimeError("the episode is over")
        index = list(self.env.action_names).index(action)
        frame, reward, done, info = self.env.step(index)
        self.frame = frame
        self.steps += 1
        self.done = bool(done)
        self._info = info
        newly = [name for name in ACHIEVEMENTS if info["achievements"].get(name, 0) > 0 and name not in self.unlocked]
        self.unlocked.extend(newly)
        return ActionResult(action=action, crafter_reward=float(reward), unlocked=newly, done=self.done)

    @property
    def achievement_counts(self) -> dict[str, int]:
        """How many times each achievement has been achieved so far in the episode."""
        return {name: int(count) for name, count in (self._info.get("achievements") or {}).items()}

    # ----- what the model sees -----

    @property
    def player(self) -> Any:
        return self.env._player

    def inventory(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._info.get("inventory", {}).items()}

    def vitals(self) -> dict[str, int]:
        inventory = self.inventory()
        return {name: inventory.get(name, 0) for name in VITALS}

    def items(self) -> dict[str, int]:
        return {k: v for k, v in self.inventory().items() if k not in VITALS and v > 0}

    def facing(self) -> tuple[str, str]:
        """(direction word, what occupies the cell in front)."""
        player = self.player
        dx, dy = int(player.facing[0]), int(player.facing[1])
        target = (int(player.pos[0]) + dx, int(player.pos[1]) + dy)
        return _DIRECTIONS.get((dx, dy), "?"), self._cell_name(target)

    def _cell_name(self, pos: tuple[int, int]) -> str:
        material, obj = self.env._world[pos]
        if obj is not None:
            return type(obj).__name__.lower()
        return material or "void"

    def local_grid(self, width: int = 9, height: int = 7) -> list[list[str]]:
        """Names of the cells around the player (rows top to bottom), the player's own cell as 'you'."""
        px, py = (int(v) for v in self.player.pos)
        rows = []
        for dy in range(-(height // 2), height // 2 + 1):
            row = []
            for dx in range(-(width // 2), width // 2 + 1):
                row.append("you" if (dx, dy) == (0, 0) else self._cell_name((px + dx, py + dy)))
            rows.append(row)
        return rows

    def nearby(self, width: int = 9, height: int = 7) -> list[tuple[str, int, int]]:
        """The nearest cell of each notable kind in view: (name, dx, dy), closest first."""
        grid = self.local_grid(width, height)
        best: dict[str, tuple[int, int, int]] = {}
        for row_index, row in enumerate(grid):
            for col_index, name in enumerate(row):
                if name in _BACKGROUND or name == "you":
                    continue
                dx, dy = col_index - width // 2, row_index - height // 2
                distance = abs(dx) + abs(dy)
                if name not in best or distance < best[name][0]:
                    best[name] = (distance, dx, dy)
        ordered = sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))
        return [(name, dx, dy) for name, (_, dx, dy) in ordered]

    def observation_text(self, *, turn: int, max_turns: int) -> str:
        vitals = self.vitals()
        items = self.items()
        direction, front = self.facing()
        nearby = self.nearby()
        lines = [
            "=== CRAFTER GAME STATE ===",
            f"Turn: {turn}/{max_turns}  World step: {self.steps}/{self.config.length}",
            "Vitals: " + ", ".join(f"{name} {vitals[name]}/9" for name in VITALS),
            f"Time: {'day' if self.env._world.daylight > 0.3 else 'night'}"
            + (" (sleeping)" if getattr(self.player, "sleeping", False) else ""),
            f"Position: {list(int(v) for v in self.player.pos)}  Facing: {direction} ({front})",
            "Inventory: " + (", ".join(f"{k}: {v}" for k, v in items.items()) if items else "empty"),
            "Achievements: " + (", ".join(self.unlocked) if self.unlocked else "none")
            + f" ({len(self.unlocked)}/{len(ACHIEVEMENTS)})",
            "Nearby: " + ("; ".join(f"{name} {_offset_words(dx, dy)}" for name, dx, dy in nearby) or "nothing notable"),
            "Local map (9x7, you at centre; rows top to bottom):",
            *(" ".join(f"{cell:<8}" for cell in row).rstrip() for row in self.local_grid()),
        ]
        return "\n".join(lines)

    def observation(self, *, turn: int, max_turns: int) -> dict[str, Any]:
        """The structured observation (no image) recorded on each step."""
        direction, front = self.facing()
        return {
            "text": self.observation_text(turn=turn, max_turns=max_turns),
            "turn": turn,
            "world_step": self.steps,
            "vitals": self.vitals(),
            "inventory": self.items(),
            "achievements": list(self.unlocked),
            "position": [int(v) for v in self.player.pos],
            "facing": {"direction": direction, "target": front},
            "done": self.done,
        }


def _offset_words(dx: int, dy: int) -> str:
    if dx == 0 and dy == 0:
        return "here"
    parts = []
    if dx:
        parts.append(f"{abs(dx)} {'right' if dx > 0 else 'left'}")
    if dy:
        parts.append(f"{abs(dy)} {'down' if dy > 0 else 'up'}")
    return "(" + ", ".join(parts) + ")"
