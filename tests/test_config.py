"""Recipes: every file in recipes/ validates; bad recipes fail with every problem named by its YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest

from longbert.config import load_recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.strategies.base import get_entry

# Every training recipe; the pretraining ones (pretrain_*.yaml, `longbert pretrain`) are tests/test_pretrain.py's.
RECIPES = sorted(p for p in (Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml")
                 if not p.name.startswith("pretrain_"))


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert {"imdb_sliding.yaml", "imdb_truncate.yaml", "imdb_chunk.yaml", "imdb_quick.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_validates_and_starts_with_its_command(path):
    recipe = load_recipe(path)
    assert recipe.name
    get_entry(recipe.strategy.name)
    lines = path.read_text().splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    assert header, "each recipe starts with a comment saying what it runs"
    assert any(f"longbert train recipes/{path.name}" in line or "longbert compare" in line for line in header), \
        "the header comment gives the command that runs the recipe"


def test_overrides_apply_and_are_typed():
    recipe = load_recipe(None, ["strategy.name=sliding", "strategy.stride=128", "train.learning_rate=2e-5",
                                "data.label_names=[a, b]", "output_dir=/tmp/x"])
    assert recipe.strategy.name == "sliding" and recipe.strategy.stride == 128
    assert recipe.train.learning_rate == 2e-5 and recipe.data.label_names == ["a", "b"]
    assert recipe.output_dir == "/tmp/x"


def test_integers_are_accepted_where_floats_are_expected():
    assert load_recipe(None, ["train.learning_rate=1"]).train.learning_rate == 1.0


def test_round_trip_through_yaml(tmp_path):
    recipe = load_recipe(None, ["strategy=truncate", "strategy.mode=tail"])
    path = tmp_path / "again.yaml"
    path.write_text(recipe_to_yaml(recipe))
    assert load_recipe(path) == recipe


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(LongbertError, match=r"unknown recipe key 'train.lr'; valid keys in train: epochs, max_steps"):
        load_recipe(None, ["train.lr=1e-4"])


def test_stride_larger_than_window_names_both_values():
    with pytest.raises(LongbertError, match=r"strategy.stride must be <= strategy.window, got 600 > 512"):
        load_recipe(None, ["strategy=sliding", "strategy.window=512", "strategy.stride=600"])


def test_unknown_strategy_lists_the_registry():
    with pytest.raises(LongbertError, match=r"unknown strategy 'chnk'; valid strategies: .*chunk.*sliding.*truncate"):
        load_recipe(None, ["strategy.name=chnk"])


def test_every_problem_is_collected_at_once():
    with pytest.raises(LongbertError) as error:
        load_recipe(None, ["train.epochs=0", "train.batch_size=big", "model.finetune=partly", "data.nope=1"])
    message = str(error.value)
    assert message.startswith("overrides has 4 problems")
    for part in ("train.epochs must be >= 1", "train.batch_size must be an integer", "model.finetune must be one of",
                 "unknown recipe key 'data.nope'"):
        assert part in message


def test_recipe_file_errors(tmp_path):
    with pytest.raises(LongbertError, match="recipe file not found"):
        load_recipe(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(LongbertError, match="is not valid YAML"):
        load_recipe(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(LongbertError, match="must hold a mapping"):
        load_recipe(listy)
    with pytest.raises(LongbertError, match="must look like key.path=value"):
        load_recipe(None, ["train.epochs"])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("data: 3\n")
    with pytest.raises(LongbertError, match="data must be a mapping"):
        load_recipe(wrong)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n"])
def test_an_empty_recipe_is_refused(tmp_path, text):
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    with pytest.raises(LongbertError, match=r"empty.yaml is empty, and an empty recipe would train on nothing but defaults"):
        load_recipe(empty, ["train.epochs=1"])


def test_a_duplicate_key_names_the_key_and_both_lines(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("train:\n  epochs: 1\n  batch_size: 4\n  epochs: 3\n")
    with pytest.raises(LongbertError, match=r"twice.yaml is not valid YAML: line 4, column 3: "
                                            r"key 'epochs' appears twice in one mapping \(first at line 2\)"):
        load_recipe(twice)
    top = tmp_path / "top.yaml"
    top.write_text("seed: 1\nname: a\nseed: 2\n")
    with pytest.raises(LongbertError, match=r"line 3, column 1: key 'seed' appears twice"):
        load_recipe(top)
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {epochs: 1}\ntrain:\n  <<: *b\n  epochs: 2\n")
    with pytest.raises(LongbertError, match="unknown recipe key 'base'"):  # a merge override is no duplicate
        load_recipe(merged)


@pytest.mark.parametrize("override, fragment", [
    ("train.epochs=[1,", r"override 'train.epochs=\[1,': the value is not valid YAML \(line 1, column 4: "),
    ("data.label_names={a: 1, a: 2}", r"the value is not valid YAML \(.*key 'a' appears twice"),
])
def test_an_override_that_is_not_yaml(override, fragment):
    with pytest.raises(LongbertError, match=fragment):
        load_recipe(None, [override])


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", "a\\b", "..", ".hidden", ""])
def test_a_run_name_must_be_a_plain_folder_name(name):
    with pytest.raises(LongbertError, match=r"name .* must be a plain folder name"):
        load_recipe(None, [f"name={name!r}"])


def test_output_dir_may_be_any_path():
    recipe = load_recipe(None, ["name=run-1.b", "output_dir=../elsewhere/x"])
    assert recipe.name == "run-1.b" and recipe.output_dir == "../elsewhere/x"


def test_a_recipe_file_with_a_path_like_name_is_refused(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: ../../etc\ntrain:\n  epochs: 1\n")
    with pytest.raises(LongbertError, match=r"r.yaml: name '../../etc' must be a plain folder name"):
        load_recipe(recipe)


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A stand-in for longbert/recipes/ holding two recipes."""
    import longbert.config

    folder = tmp_path / "packaged"
    folder.mkdir()
    (folder / "imdb_sliding.yaml").write_text("# longbert train imdb_sliding\nstrategy:\n  name: sliding\n")
    (folder / "imdb_quick.yaml").write_text("# longbert train imdb_quick\ntrain:\n  epochs: 1\n")
    monkeypatch.setattr(longbert.config, "PACKAGED_RECIPES", folder)
    return folder


def test_the_packaged_recipes_folder_is_inside_the_package():
    import longbert
    import longbert.config

    assert longbert.config.PACKAGED_RECIPES == Path(longbert.__file__).resolve().parent / "recipes"


def test_a_bare_name_finds_the_packaged_recipe(packaged, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("imdb_sliding", "imdb_sliding.yaml"):
        recipe = load_recipe(name, ["strategy.stride=100"])
        assert recipe.name == "imdb_sliding" and recipe.strategy.name == "sliding" and recipe.strategy.stride == 100
    (tmp_path / "imdb_sliding.yaml").write_text("strategy:\n  name: truncate\n")
    assert load_recipe("imdb_sliding.yaml").strategy.name == "truncate", "a file in the working directory comes first"


def test_a_name_found_nowhere_lists_the_packaged_recipes(packaged, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LongbertError, match=r"recipe file not found: imdb_slidng; packaged recipes \(usable by name\): "
                                            r"imdb_quick, imdb_sliding"):
        load_recipe("imdb_slidng")
    with pytest.raises(LongbertError, match="recipe file not found: sub/imdb_sliding.yaml"):
        load_recipe("sub/imdb_sliding.yaml")  # a path is a path: only bare names are looked up in the package
