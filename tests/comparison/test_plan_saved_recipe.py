"""A comparison's run folder whose saved recipe.yaml is planted or damaged (an alias bomb, bytes that are not text, a
list): read within the recipe loader's bounds, and the folder refused in one line, like one holding another recipe."""

from __future__ import annotations

import pytest

from longbert.comparison.plan import plan_runs, resolve_recipes
from longbert.errors import LongbertError


def alias_bomb(levels: int = 18) -> str:
    """A mapping whose aliases expand to 2**levels values (past the loader's 100,000) in under 1 KB."""
    lines = ["a0: &a0 {x: 1, y: 2}"]
    lines += [f"a{i}: &a{i} {{l: *a{i - 1}, r: *a{i - 1}}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("content, fragments", [
    (alias_bomb().encode(), ["its recipe.yaml is not a readable recipe: line ",
                             "expands to more than 100,000 values through its aliases"]),
    (b"name: x\n\xff\n", ["its recipe.yaml is not UTF-8 text (byte 8 is 0xff)"]),
    (b"- a list\n- not a recipe\n", ["its recipe.yaml does not hold a recipe"]),
], ids=["alias-bomb", "not-utf8", "a-list"])
def test_a_saved_recipe_that_cannot_be_read_refuses_the_folder_in_one_line(tmp_path, content, fragments):
    recipes = resolve_recipes(["chunk"], {"strategy": {"name": "chunk"}}, "base", [], "x", tmp_path)
    run_dir = tmp_path / "x" / "chunk"
    run_dir.mkdir(parents=True)
    (run_dir / "recipe.yaml").write_bytes(content)
    with pytest.raises(LongbertError) as caught:
        plan_runs(recipes)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600, message
    assert message.startswith(f"{run_dir} holds a run with a different recipe ("), message
    for fragment in fragments:
        assert fragment in message, message


def test_a_run_saved_before_a_setting_existed_is_reused_when_the_setting_is_at_its_default(tmp_path):
    """A recipe.yaml written before train.layer_decay existed lacks it: loaded today it gets the default (1.0), which
    is what the run did, so the run is reused; the same file with a different value is refused."""
    import yaml

    from longbert.config import recipe_to_yaml

    recipes = resolve_recipes(["chunk"], {"strategy": {"name": "chunk"}}, "base", [], "x", tmp_path)
    run_dir = tmp_path / "x" / "chunk"
    run_dir.mkdir(parents=True)
    older = yaml.safe_load(recipe_to_yaml(recipes["chunk"]))
    del older["train"]["layer_decay"]
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(older))
    (run_dir / "metrics.json").write_text("{}")
    assert plan_runs(recipes) == {"chunk": "reuse"}
    older["train"]["layer_decay"] = 0.5
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(older))
    with pytest.raises(LongbertError, match=r"train.layer_decay: 0.5 -> 1.0"):
        plan_runs(recipes)
