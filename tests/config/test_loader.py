"""Reading a recipe: overrides are typed, every problem is collected with its YAML path, and YAML that a recipe never
needs (duplicate keys, alias bombs, values a tag cannot construct, deep nesting) is one clear error, never a
traceback or an unbounded message."""

from __future__ import annotations

import re
import typing

import pytest

from longbert.config import (
    MULTI_LABEL,
    PROBLEM_TYPES,
    SINGLE_LABEL,
    ProblemType,
    is_multi_label,
    load_recipe,
    parse_override,
    recipe_from_dict,
    recipe_to_yaml,
)
from longbert.config.loader import MAX_YAML_VALUES
from longbert.config.validation import short_repr
from longbert.errors import LongbertError


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


def test_a_recipe_without_a_strategy_gets_the_registrys_default():
    from longbert.strategies.registry import strategy_with_role

    assert load_recipe(None, ["train.epochs=1"]).strategy.name == strategy_with_role("default")


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(LongbertError, match=r"unknown recipe key 'train.lr'; valid keys in train: epochs, max_steps"):
        load_recipe(None, ["train.lr=1e-4"])


def test_a_bad_override_is_said_to_come_from_the_command_line_not_the_recipe_file(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("train:\n  epochs: 1\n")
    with pytest.raises(LongbertError) as error:
        load_recipe(recipe, ["train.lr=1e-4"])
    assert str(error.value).startswith("overrides (--set): unknown recipe key 'train.lr'")
    assert "mine.yaml" not in str(error.value)
    recipe.write_text("train:\n  epochs: 0\n")
    with pytest.raises(LongbertError) as error:  # one problem of each: each said where it comes from
        load_recipe(recipe, ["train.batch_size=big"])
    assert str(error.value) == (f"overrides (--set): train.batch_size must be an integer, got 'big'; {recipe}: "
                                "train.epochs must be >= 1, got 0")


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
    assert message.startswith("overrides (--set) has 4 problems")
    for part in ("train.epochs must be >= 1", "train.batch_size must be an integer", "model.finetune must be one of",
                 "unknown recipe key 'data.nope'"):
        assert part in message


def test_the_shared_optimiser_settings_are_checked_in_both_recipes():
    from longbert.config import load_pretrain_recipe

    bad = ["train.warmup_ratio=1", "train.max_grad_norm=-1", "train.mixed_precision=fp8", "train.learning_rate=0"]
    for load in (load_recipe, load_pretrain_recipe):
        with pytest.raises(LongbertError) as error:
            load(None, bad)
        for part in ("train.warmup_ratio must be in [0, 1), got 1", "train.max_grad_norm must be >= 0, got -1",
                     "train.mixed_precision must be one of auto, no, bf16, fp16",
                     "train.learning_rate and head_learning_rate must be > 0"):
            assert part in str(error.value)


def test_a_null_among_the_label_names_is_refused():
    with pytest.raises(LongbertError, match=r"data.label_names must be a list of str, got \[None, 'neg', 'pos'\]"):
        load_recipe(None, ["data.label_names=[null, neg, pos]"])


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
    # an empty value is not null: `output_dir=` once ran into runs/<name>
    with pytest.raises(LongbertError, match="^overrides \\(--set\\): override 'output_dir=' gives no value; write "
                                            "output_dir=null for null$|override 'output_dir=' gives no value"):
        load_recipe(None, ["output_dir="])
    with pytest.raises(LongbertError, match="recipe .* is a folder; name a recipe file"):
        load_recipe(tmp_path)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("data: 3\n")
    with pytest.raises(LongbertError, match="data must be a mapping"):
        load_recipe(wrong)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n"])
def test_an_empty_recipe_is_refused(tmp_path, text):
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    with pytest.raises(LongbertError,
                       match=r"empty.yaml is empty, and an empty recipe would train on nothing but defaults"):
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


# -- YAML a recipe never needs ---------------------------------------------------------------------------------


def alias_bomb(levels: int) -> str:
    """Billion laughs: each list repeats the one before ten times, so `levels` lines expand to 10**levels values."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\ntrain:\n  epochs: *l{levels - 1}\n"


def test_an_alias_bomb_is_refused_in_one_line_naming_the_file(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(6))  # a million values from 400 bytes
    assert 10 ** 6 > MAX_YAML_VALUES
    with pytest.raises(LongbertError) as error:
        load_recipe(bomb)
    message = str(error.value)
    assert message.startswith(f"{bomb} is not valid YAML: line ") and "\n" not in message
    assert f"expands to more than {MAX_YAML_VALUES:,} values through its aliases" in message
    assert len(message) < 300


def test_an_alias_bomb_in_an_override_is_refused():
    bomb = "[" + ", ".join(["&a [x, x, x, x, x, x, x, x, x, x]"] + ["*a"] * 9) + "]"
    for _ in range(5):  # each level repeats the one before ten times
        bomb = f"[&b{_} {bomb}, " + ", ".join([f"*b{_}"] * 9) + "]"
    with pytest.raises(LongbertError, match=r"override 'train.epochs=.*: the value is not valid YAML \(.*expands to"):
        parse_override(f"train.epochs={bomb}")


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.write_text("train:\n  epochs: &a [*a]\n")
    with pytest.raises(LongbertError, match=r"loop.yaml is not valid YAML: .*an alias refers to the value that "
                                            r"contains it"):
        load_recipe(loop)


def test_a_large_value_is_never_printed_whole(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(f"train:\n  epochs: {list(range(5000))}\nmodel:\n  class_weights: {['x'] * 5000}\n")
    with pytest.raises(LongbertError) as error:
        load_recipe(big)
    message = str(error.value)
    assert "train.epochs must be an integer, got [0, 1, 2, " in message and "model.class_weights" in message
    assert len(message) < 600, "each value is cut to about 80 characters"


@pytest.mark.parametrize("value, reason", [
    ("!!int abc", "invalid literal for int() with base 10: 'abc'"),
    ("!!float x", "could not convert string to float: 'x'"),
    ("!!timestamp soon", ""),
])
def test_a_tagged_value_yaml_cannot_construct_is_one_clear_error(tmp_path, value, reason):
    with pytest.raises(LongbertError) as error:
        parse_override(f"train.epochs={value}")
    assert str(error.value).startswith(f"override 'train.epochs={value}': the value is not valid YAML (line 1, "
                                       f"column 1: cannot read a tagged value ({reason}")
    recipe = tmp_path / "tagged.yaml"
    recipe.write_text(f"train:\n  epochs: {value}\n")
    with pytest.raises(LongbertError, match=rf"tagged.yaml is not valid YAML: line 2, column 11: cannot read a "
                                            rf"tagged value \({reason[:20]}"):
        load_recipe(recipe)


def test_values_nested_too_deeply_are_one_clear_error():
    with pytest.raises(LongbertError, match=r"override 'data.label_names=\[\[\[.*\.\.\.: the value is not valid YAML "
                                            r"\(the values are nested too deeply\)") as error:
        load_recipe(None, ["data.label_names=" + "[" * 5000 + "]" * 5000])
    assert len(str(error.value)) < 300, "the override itself is cut too"


@pytest.mark.parametrize("value, text", [
    ("short", "'short'"),
    ([1, [2, 3], {"a": None}], "[1, [2, 3], {'a': None}]"),
    (list(range(100)), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 2..."),
    ("x" * 1000, "'" + "x" * 79 + "..."),
])
def test_short_repr_cuts_long_values(value, text):
    assert short_repr(value) == text


def test_short_repr_of_a_value_shared_a_billion_times_is_instant():
    value = ["lol"]
    for _ in range(9):
        value = [value] * 10
    assert short_repr(value).startswith("[[[[[[[[[['lol'], ['lol']") and len(short_repr(value)) <= 83


def test_the_problem_type_is_one_literal_read_as_a_string():
    """ProblemType names the choices PROBLEM_TYPES validates; a recipe spells them as before, and the messages for a
    wrong value are the string field's."""
    assert typing.get_args(ProblemType) == PROBLEM_TYPES == (SINGLE_LABEL, MULTI_LABEL) == ("single_label",
                                                                                              "multi_label")
    assert is_multi_label("multi_label") and not is_multi_label("single_label")
    recipe = recipe_from_dict({"model": {"problem_type": "multi_label"}, "train": {"best_metric": "macro_f1"}})
    assert recipe.model.problem_type == "multi_label"
    for value, message in ((3, "model.problem_type must be a string, got 3"),
                           ("both", "model.problem_type must be one of single_label, multi_label, got 'both'")):
        with pytest.raises(LongbertError, match=re.escape(message)):
            recipe_from_dict({"model": {"problem_type": value}})


def test_train_takes_the_section_of_its_own_strategy_under_the_overrides_and_checks_the_others(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("strategy: {name: chunk, window: 100}\nchunk: {pooling: attention}\n"
                    "bigbird: {unit_tokens: 126}\n")
    recipe = load_recipe(path)
    assert (recipe.strategy.name, recipe.strategy.window, recipe.strategy.pooling) == ("chunk", 100, "attention")
    assert load_recipe(path, ["strategy.pooling=max"]).strategy.pooling == "max"  # --set wins over the section
    path.write_text("strategy: {name: chunk}\nbigbird: {unit_token: 126}\n")
    with pytest.raises(LongbertError, match=r"r.yaml: section 'bigbird' has no field 'unit_token'; bigbird's "
                                            r"fields: .*unit_tokens"):
        load_recipe(path)
