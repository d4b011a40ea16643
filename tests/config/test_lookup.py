"""Finding a recipe: a file comes first; a bare name finds a packaged recipe in its command's folders (recipes/,
recipes/pretrain/, recipes/compare/), by its short name or the name it had before the folders (pretrain_imdb_cpu);
a packaged recipe of another kind is refused in one line naming the command that runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from longbert.cli import app
from longbert.config import load_pretrain_recipe, load_recipe, read_recipe_file
from longbert.config.lookup import FOLDERS, find_recipe, packaged_recipes
from longbert.errors import LongbertError


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A stand-in for longbert/recipes/ holding two recipes."""
    import longbert.config.lookup

    folder = tmp_path / "packaged"
    folder.mkdir()
    (folder / "imdb_sliding.yaml").write_text("# longbert train imdb_sliding\nstrategy:\n  name: sliding\n")
    (folder / "imdb_quick.yaml").write_text("# longbert train imdb_quick\ntrain:\n  epochs: 1\n")
    monkeypatch.setattr(longbert.config.lookup, "PACKAGED_RECIPES", folder)
    return folder


def test_the_packaged_recipes_folder_is_inside_the_package():
    import longbert
    import longbert.config
    import longbert.config.lookup

    inside = Path(longbert.__file__).resolve().parent / "recipes"
    assert longbert.config.PACKAGED_RECIPES == longbert.config.lookup.PACKAGED_RECIPES == inside
    assert {p.name for p in inside.iterdir() if p.is_dir()} == {"pretrain", "compare"} == set(FOLDERS) - {""}


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


def test_each_command_lists_the_names_it_accepts():
    assert list(packaged_recipes("pretrain")) == ["hyperpartisan_cpu", "imdb_cpu", "imdb_gpu"]
    train = packaged_recipes("train")
    assert {"imdb_sliding", "imdb_quick", "compare_imdb", "compare_hyperpartisan"} <= set(train)
    assert not any(name.startswith("pretrain") for name in train)
    assert list(packaged_recipes("compare"))[:2] == ["hyperpartisan", "imdb"]
    every = packaged_recipes()  # the names of before the folders, each recipe once
    assert {"pretrain_imdb_cpu", "pretrain_imdb_gpu", "pretrain_hyperpartisan_cpu", "compare_imdb",
            "compare_hyperpartisan", "imdb_sliding"} <= set(every)
    assert len(set(every.values())) == len(every)


@pytest.mark.parametrize("load, command, names, file, run_name", [
    (load_pretrain_recipe, "pretrain", ["pretrain_imdb_cpu", "imdb_cpu", "imdb_cpu.yaml", "pretrain_imdb_cpu.yaml"],
     "pretrain/imdb_cpu.yaml", "pretrain_imdb_cpu"),
    (load_recipe, "train", ["compare_imdb", "imdb", "compare_imdb.yaml"], "compare/imdb.yaml", "compare_imdb"),
    (load_recipe, "train", ["imdb_sliding", "imdb_sliding.yaml"], "imdb_sliding.yaml", "imdb_sliding"),
])
def test_old_and_new_bare_names_find_the_recipe_in_its_folder(load, command, names, file, run_name, tmp_path,
                                                              monkeypatch):
    import longbert.config.lookup

    monkeypatch.chdir(tmp_path)
    for name in names:
        assert find_recipe(name, command) == longbert.config.lookup.PACKAGED_RECIPES / file
        assert load(name).name == run_name, "a moved recipe keeps its run name"


@pytest.mark.parametrize("command", ["compare", None])
def test_compare_finds_its_base_recipes_by_old_and_new_name(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("compare_imdb", "imdb", "compare_imdb.yaml"):
        assert read_recipe_file(name, command)["name"] == "compare_imdb"
    assert read_recipe_file("imdb_sliding", command)["name"] == "imdb_sliding", "a fine-tuning recipe is a base too"
    assert find_recipe("compare_hyperpartisan", command).relative_to(find_recipe("imdb_quick").parent) == \
        Path("compare/hyperpartisan.yaml")


@pytest.mark.parametrize("load, given, message", [
    (load_recipe, "pretrain_imdb_cpu", "pretrain_imdb_cpu is a pretraining recipe (packaged in recipes/pretrain/): "
                                       "run it with `longbert pretrain pretrain_imdb_cpu`"),
    (load_recipe, "imdb_gpu", "imdb_gpu is a pretraining recipe (packaged in recipes/pretrain/): run it with "
                              "`longbert pretrain imdb_gpu`"),
    (load_pretrain_recipe, "imdb_quick", "imdb_quick is a fine-tuning recipe (packaged in recipes/): run it with "
                                         "`longbert train imdb_quick`"),
    (load_pretrain_recipe, "compare_imdb", "compare_imdb is a compare base recipe (packaged in recipes/compare/): "
                                           "run it with `longbert compare --recipe compare_imdb`"),
])
def test_a_packaged_recipe_of_another_kind_names_its_command(load, given, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LongbertError) as error:
        load(given)
    assert str(error.value) == message


def test_a_packaged_recipe_given_by_its_path_is_known_by_its_folder():
    path = find_recipe("imdb_cpu", "pretrain")
    with pytest.raises(LongbertError, match=rf"^{path} is a pretraining recipe \(packaged in recipes/pretrain/\): run "
                                            rf"it with `longbert pretrain {path}`$"):
        load_recipe(path)
    checkout = Path(__file__).resolve().parents[2] / "recipes" / "imdb_quick.yaml"  # the checkout's recipes/ link
    with pytest.raises(LongbertError, match=r"is a fine-tuning recipe \(packaged in recipes/\): run it with "
                                            r"`longbert train .*imdb_quick.yaml`"):
        load_pretrain_recipe(checkout)


def test_a_users_own_recipe_of_another_kind_is_known_by_its_contents(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("masking:\n  probability: 0.2\n")
    with pytest.raises(LongbertError, match=r"mine.yaml is a pretraining recipe \(it has a masking section\): run it "
                                            r"with `longbert pretrain .*mine.yaml`"):
        load_recipe(mine)
    mine.write_text("model:\n  finetune: lora\n")
    with pytest.raises(LongbertError, match=r"mine.yaml is a training recipe \(it has no masking section\): run it "
                                            r"with `longbert train .*mine.yaml`"):
        load_pretrain_recipe(mine)


@pytest.mark.parametrize("command, recipe, hint", [
    ("train", "pretrain_imdb_cpu", "run it with `longbert pretrain pretrain_imdb_cpu`"),
    ("train", "imdb_cpu", "run it with `longbert pretrain imdb_cpu`"),
    ("pretrain", "imdb_quick", "run it with `longbert train imdb_quick`"),
])
def test_the_cli_says_which_command_runs_a_recipe_in_one_line(command, recipe, hint):
    result = CliRunner().invoke(app, [command, recipe])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and hint in lines[0]
