"""The crafter environment wrapper on its own: action names, image sizes, the text observation, achievements."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from synth_ai.bundled_apps import APPS_DIR

pytest.importorskip("crafter")


def crafter_env():
    spec = importlib.util.spec_from_file_location(
        "crafter_env_under_test", APPS_DIR / "crafter" / "crafter_env.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_action_names_match_crafter_and_aliases_normalise() -> None:
    import crafter

    env = crafter_env()
    assert list(env.ACTION_NAMES) == list(crafter.Env(area=(16, 16)).action_names)
    assert list(env.ACHIEVEMENTS) == list(crafter.constants.achievements)
    assert env.normalise_action(" Move Left ") == "move_left"
    assert env.normalise_action("left") == "move_left"
    assert env.normalise_action("craft_wood_pickaxe") == "make_wood_pickaxe"
    assert env.normalise_action("fly") is None and env.normalise_action(3) is None


def test_image_size_and_episode_config_validation() -> None:
    env = crafter_env()
    assert env.parse_image_size(None) == (64, 64)
    assert env.parse_image_size(96) == (96, 96)
    assert env.parse_image_size([80, 48]) == (80, 48)
    for bad in (8, [64], "x", True, [2000, 64]):
        with pytest.raises(ValueError):
            env.parse_image_size(bad)
    config = env.EpisodeConfig.from_request(None, {"seed": 5, "area": [32, 32], "length": 50})
    assert config.to_dict() == {"seed": 5, "area": [32, 32], "length": 50, "image_size": [64, 64]}
    assert env.EpisodeConfig.from_request(None, {}, default_seed=42).seed == 42
    with pytest.raises(ValueError, match="length"):
        env.EpisodeConfig.from_request(1, {"length": 0})
    # a huge world would take hours of world generation (and gigabytes); bad numbers are ValueErrors (400s)
    for bad in ({"area": [100_000, 100_000]}, {"area": [0, 0]}, {"area": [-5, 5]}, {"seed": float("inf")},
                {"area": ["x", 4]}, {"image_size": float("inf")}):
        with pytest.raises(ValueError):
            env.EpisodeConfig.from_request(None, bad)


def test_episode_observation_and_achievements() -> None:
    env = crafter_env()
    episode = env.CrafterEpisode(env.EpisodeConfig(seed=3, area=(32, 32), length=20))
    episode.reset()
    assert episode.frame.shape == (64, 64, 3)
    obs = episode.observation(turn=0, max_turns=4)
    text = obs["text"]
    assert text.splitlines()[0] == "=== CRAFTER GAME STATE ==="
    assert "Vitals: health 9/9, food 9/9, drink 9/9, energy 9/9" in text
    grid = text.split("Local map (9x7, you at centre; rows top to bottom):\n")[1].splitlines()
    assert len(grid) == 7 and grid[3].split()[4] == "you"
    assert obs["vitals"]["health"] == 9 and obs["achievements"] == [] and obs["facing"]["direction"] == "down"
    for name, dx, dy in episode.nearby():
        assert grid[dy + 3].split()[dx + 4] == name  # "nearby" agrees with the map

    steps = 0
    while not episode.done:
        result = episode.act("noop")
        steps += 1
        assert result.unlocked == [] or set(result.unlocked) <= set(env.ACHIEVEMENTS)
    assert steps == 20 and episode.steps == 20  # the episode length bounds the world steps
    with pytest.raises(RuntimeError):
        episode.act("noop")


def test_same_seed_same_world_over_many_steps() -> None:
    """Creatures move and spawn from the world's seeded generator: same seed and actions, same frames."""
    env = crafter_env()

    def play(seed: int) -> list[bytes]:
        episode = env.CrafterEpisode(env.EpisodeConfig(seed=seed, area=(32, 32), length=200))
        episode.reset()
        frames = []
        for step in range(60):
            episode.act(env.ACTION_NAMES[(step * 7) % 5])  # noop and the four moves, in a fixed mixed order
            frames.append(episode.frame.tobytes())
        return frames

    assert play(11) == play(11)
