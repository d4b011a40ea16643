"""What a comparison plans before it trains: one recipe per strategy from the base recipe and the overrides that
reach it, and an override that cannot be read failing once, in one line, before anything is resolved."""

from __future__ import annotations

import pytest

from longbert.comparison.orchestrator import compare
from longbert.comparison.plan import resolve_recipes, split_overrides
from longbert.config import parse_override
from longbert.errors import LongbertError


def test_overrides_reach_every_strategy_those_with_the_field_or_the_one_named(tmp_path):
    base = {"strategy": {"name": "chunk", "window": 100}, "train": {"epochs": 1}}
    overrides = ["train.epochs=3", "strategy.token_pooling=mean", "strategy.pooling=max", " truncate.max_tokens = 62",
                 "truncate.head_tokens=16",
                 "sliding.stride=7", "data.label_names=[a, b]"]
    recipes = resolve_recipes(["truncate", "chunk"], base, "base", overrides, "x", tmp_path)
    truncate, chunk = recipes["truncate"], recipes["chunk"]
    for recipe in (truncate, chunk):  # every strategy, values typed as YAML reads them
        assert recipe.train.epochs == 3 and recipe.data.label_names == ["a", "b"]
        assert recipe.strategy.token_pooling == "mean"  # both have the field
    assert chunk.strategy.pooling == "max" and chunk.strategy.window == 100  # the base's settings for its strategy
    assert truncate.strategy.max_tokens == 62 and chunk.name == "x-chunk"
    assert chunk.output_dir == str(tmp_path / "x" / "chunk")
    # One parser for `train --set` and `compare --set`: its message, before anything is resolved.
    with pytest.raises(LongbertError, match="must look like key.path=value"):
        split_overrides(["train.epochs"], ["chunk"])
    with pytest.raises(LongbertError, match="compare sets strategy.name itself"):
        split_overrides(["strategy.name=chunk"], ["chunk"])
    with pytest.raises(LongbertError, match="truncate.<field>=value"):
        split_overrides(["truncate=3"], ["chunk"])


@pytest.mark.parametrize("value", ["[1,", "{a: 1, a: 2}", "*undefined"])
def test_a_malformed_override_value_is_one_clear_error_before_any_training(tmp_path, value):
    with pytest.raises(LongbertError, match=r"override 'train.epochs=.*': the value is not valid YAML"):
        parse_override(f"train.epochs={value}")
    with pytest.raises(LongbertError, match="train.epochs"):
        compare(["truncate", "chunk"], overrides=[f"train.epochs={value}"], runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# A YAML tag whose constructor rejects the value raises ValueError or AttributeError out of yaml.load, which
# config.read_yaml does not turn into a yaml.YAMLError, so parse_override lets it through as a traceback.
@pytest.mark.parametrize("value", ["!!int abc", "!!float x", "!!timestamp soon"])
def test_a_tagged_value_yaml_cannot_construct_is_one_clear_error(tmp_path, value):
    with pytest.raises(LongbertError, match=r"override 'train.epochs=.*': the value is not valid YAML"):
        parse_override(f"train.epochs={value}")
    with pytest.raises(LongbertError, match="train.epochs"):
        compare(["truncate", "chunk"], overrides=[f"train.epochs={value}"], runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_section_named_after_a_strategy_holds_its_fields_below_the_overrides(tmp_path):
    base = {"strategy": {"name": "chunk", "window": 100, "pooling": "attention"}, "train": {"epochs": 1},
            "bigbird": {"unit_tokens": 126, "pooling": "attention"}, "chunk": {"window": 200}}
    recipes = resolve_recipes(["chunk", "bigbird", "truncate"], base, "base", ["bigbird.pooling=max"], "x",
                              tmp_path)
    chunk, bigbird, truncate = recipes["chunk"], recipes["bigbird"], recipes["truncate"]
    assert chunk.strategy.window == 200 and chunk.strategy.pooling == "attention"  # the base's, then its section
    assert bigbird.strategy.unit_tokens == 126 and bigbird.strategy.pooling == "max"  # --set wins over the section
    assert truncate.strategy == resolve_recipes(["truncate"], {"train": {"epochs": 1}}, "base", [], "x",
                                                tmp_path)["truncate"].strategy  # no section: its defaults
    # The same recipe without its sections is what `longbert train` reads: the sections never reach a Recipe.
    assert "bigbird" not in chunk.to_dict()


@pytest.mark.parametrize("section, message", [
    ({"unit_token": 126}, r"base: section 'bigbird' has no field 'unit_token'; bigbird's fields: .*unit_tokens"),
    (126, r"base: section 'bigbird' must be a mapping of bigbird's fields, got 126"),
])
def test_a_strategy_section_that_cannot_apply_is_one_clear_error_even_when_not_compared(tmp_path, section,
                                                                                          message):
    with pytest.raises(LongbertError, match=message):
        resolve_recipes(["chunk"], {"train": {"epochs": 1}, "bigbird": section}, "base", [], "x", tmp_path)


def test_a_strategy_named_twice_or_an_empty_report_name_is_refused_not_guessed():
    """`--strategies truncate,truncate` was silently one row; `--name ''` silently the default's name, whose
    committed report it then replaced."""
    from longbert.comparison.plan import parse_strategies, report_name
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError, match="^--strategies names truncate twice; each strategy is one row"):
        parse_strategies("truncate,chunk,truncate")
    assert parse_strategies("truncate, chunk") == ["truncate", "chunk"]
    for gap in (",truncate", "truncate,,chunk", "truncate,"):  # accepted silently once, as if the gap were not there
        with pytest.raises(LongbertError, match=rf"^--strategies '{gap}' has an empty name between its commas"):
            parse_strategies(gap)
    for empty in ("", "  "):
        with pytest.raises(LongbertError, match="^--name is empty; give the report a name"):
            report_name(empty, None)
