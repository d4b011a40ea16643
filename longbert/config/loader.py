"""Reading recipes: YAML text -> plain data -> `key.path=value` overrides -> a validated dataclass.

YAML is read safely and within bounds: no duplicate keys, no alias bombs, and a value a tag cannot construct is a
one-line error. `build_recipe` fills a recipe dataclass from plain data (longbert.config.validation's `build`, which
collects every problem with its YAML path), so that one LongbertError names them all, each said to come from the file
or from the overrides that set it. Finding a recipe file (or a packaged one by name) is longbert.config.lookup's.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from longbert.config.validation import build, one_line, short_repr
from longbert.errors import LongbertError
from longbert.strategies.configs import config_class, strategy_names, strategy_with_role

PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a run or report name: one folder, never a path
# The most values a recipe may expand to through its aliases. The largest packaged recipe has under 100; a YAML
# alias bomb (each list repeating the previous one ten times) passes a billion in 1 KB.
MAX_YAML_VALUES = 100_000


# --------------------------------------------------------------------------------------------------------------
# Per-strategy sections


def strategy_fields(strategy: str) -> set[str]:
    """The fields a strategy's config holds, besides its name."""
    return {f.name for f in dataclasses.fields(config_class(strategy))} - {"name"}


def strategy_sections(raw: dict, source: str) -> tuple[dict, dict[str, dict]]:
    """(`raw` without its per-strategy sections, strategy -> its section). A recipe may hold a top-level mapping
    named after a strategy, `bigbird: {unit_tokens: 126}`: that strategy's own fields, used whenever it is the
    strategy that runs (`longbert train` merges the section of the recipe's strategy; `longbert compare` that of each
    strategy it compares, as `--set bigbird.unit_tokens=126` would, and a --set override still wins). Every section
    is checked against its strategy's fields, used or not, so that a misspelt field fails before anything trains."""
    rest, own = {}, {}
    for key, value in raw.items():
        if key not in strategy_names():
            rest[key] = value
            continue
        fields = sorted(strategy_fields(key))
        if not isinstance(value, dict):
            raise LongbertError(f"{source}: section {key!r} must be a mapping of {key}'s fields, got "
                                f"{short_repr(value)}")
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise LongbertError(f"{source}: section {key!r} has no field {unknown[0]!r}; {key}'s fields: "
                                f"{', '.join(fields)}")
        own[key] = value
    return rest, own


def with_strategy_section(raw: dict, source: str) -> dict:
    """`raw` with its per-strategy sections taken out and the section of its own strategy (strategy.name, or the
    default strategy when it names none) merged into its strategy section: what `longbert train` runs from a compare
    recipe."""
    rest, own = strategy_sections(raw, source)
    section = rest.get("strategy", {})
    section = {"name": section} if isinstance(section, str) else section
    if isinstance(section, dict):
        name = section.get("name", strategy_with_role("default"))
        if name in own:
            rest["strategy"] = {"name": name, **section, **own[name]}
    return rest


def build_recipe(cls: type, raw: Any, source: str, overrides: list[str] | tuple[str, ...] = ()):
    """A validated `cls` (a recipe dataclass) from plain data, or one LongbertError naming every problem (those of
    keys that `overrides` set are said to come from them, the rest from `source`)."""
    problems: list[str] = []
    recipe = build(cls, raw, "", problems)
    if problems:
        raise LongbertError(problems_message(source, problems, overrides))
    return recipe


# Where a problem of an override is said to come from: `longbert ... --set`, or the Python API's `overrides`.
OVERRIDES = "overrides (--set)"
# The recipe path a problem line is about: "unknown recipe key 'train.lr'; ..." or "train.epochs must be ...".
_PROBLEM_PATH = re.compile(r"^(?:unknown recipe key '(?P<quoted>[^']+)'|(?P<plain>[\w.]+)\b)")


def problems_message(source: str, problems: list[str], overrides: list[str] | tuple[str, ...] = ()) -> str:
    """Every problem of a recipe from `source` (a file, or OVERRIDES) as one line. A problem with a key that one of
    `overrides` set (`key.path=value`, as --set gives them) is said to come from OVERRIDES, not from the file."""
    overridden = {".".join(parse_override(text)[0]) for text in overrides}

    def path(problem: str) -> str | None:
        found = _PROBLEM_PATH.match(problem)
        return found and (found["quoted"] or found["plain"])

    from_set = [p for p in problems if path(p) in overridden or source == OVERRIDES]
    rest = [p for p in problems if p not in from_set]
    return "; ".join(one_line(where, group) for where, group in ((OVERRIDES, from_set), (source, rest)) if group)


def plain_name_problems(name: str) -> list[str]:
    """A recipe's `name` names one run folder, never a path."""
    if PLAIN_NAME.match(name):
        return []
    return [f"name {short_repr(name)} must be a plain folder name (letters, digits, '.', '_', '-', not starting "
            f"with '.'); a path belongs in output_dir"]


def recipe_to_yaml(recipe) -> str:
    """A recipe dataclass as the YAML that reads back into the same recipe (written into every run folder)."""
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------------------------------------------
# YAML


class RecipeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses what a recipe never needs and plain YAML lets through: a key written twice in one
    mapping (YAML silently keeps the last one), aliases that expand past MAX_YAML_VALUES values (an alias bomb takes
    gigabytes to expand, and then to print), and a tagged value its constructor cannot read (`!!int abc` raises a
    bare ValueError inside PyYAML)."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            check_expanded_size(node)
        return node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as error:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read a tagged value ({str(error)[:200]})", node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` may be overridden key by key; that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:  # an unhashable key: SafeLoader says so itself
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {short_repr(key)} appears twice in one mapping (first at line "
                                    f"{first_line[key]})", key_node.start_mark)
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def check_expanded_size(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand past MAX_YAML_VALUES values, or refer to themselves. Composing keeps
    an alias as a second reference to its node, so the expanded size is counted once per node (bottom up) without
    expanding anything; a yaml.composer.ComposerError names the first oversized node."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[id(node)] > MAX_YAML_VALUES:
                raise yaml.composer.ComposerError(
                    None, None, f"this value expands to more than {MAX_YAML_VALUES:,} values through its aliases; "
                                "a recipe needs far fewer", node.start_mark)
            continue
        if id(node) in open_nodes:
            raise yaml.composer.ComposerError(None, None, "an alias refers to the value that contains it",
                                              node.start_mark)
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)


def read_yaml(text: str):
    """YAML text -> plain data, refusing duplicate keys, alias bombs and unreadable tagged values; raises
    yaml.YAMLError (see `yaml_problem`)."""
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except RecursionError:  # PyYAML composes nested collections recursively
        raise yaml.YAMLError("the values are nested too deeply") from None


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as one line: 'line L, column C: what is wrong'."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def recipe_differences(saved: Path, recipe) -> str:
    """'train.learning_rate: 0.001 -> 0.002': the first few settings a saved recipe.yaml and `recipe` differ in, or
    why the saved one cannot be compared (not readable, not YAML within the loader's bounds, not a mapping)."""
    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    try:
        saved_raw = read_yaml(saved.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        return f"its recipe.yaml is not UTF-8 text (byte {error.start} is 0x{error.object[error.start]:02x})"
    except OSError as error:
        return f"its recipe.yaml cannot be read: {error.strerror or error}"
    except yaml.YAMLError as error:
        return f"its recipe.yaml is not a readable recipe: {yaml_problem(error)}"
    if saved_raw is not None and not isinstance(saved_raw, dict):
        return "its recipe.yaml does not hold a recipe (a mapping of settings)"
    old, new = flat(saved_raw or {}), flat(recipe.to_dict())
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "") if keys else "formatting differs"


# --------------------------------------------------------------------------------------------------------------
# Overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.learning_rate=2e-5` -> (['train', 'learning_rate'], 2e-05); values are read as YAML."""
    if "=" not in text:
        raise LongbertError(f"override {short_repr(text, 200)} must look like key.path=value")
    key, value = text.split("=", 1)
    if not key.strip():
        raise LongbertError(f"override {short_repr(text, 200)} has an empty key")
    if not value.strip():  # once read as null: `--set output_dir=` silently became runs/<name>
        raise LongbertError(f"override {short_repr(text, 200)} gives no value; write {key.strip()}=null for null")
    try:
        parsed = read_yaml(value)
    except yaml.YAMLError as error:
        raise LongbertError(f"override {short_repr(text, 200)}: the value is not valid YAML "
                            f"({yaml_problem(error)})") from None
    return key.strip().split("."), parsed


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply `key.path=value` overrides to a recipe's plain data, in order (a missing section is created)."""
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for key in keys[:-1]:
            if node.get(key) is None:
                node[key] = {}
            if isinstance(node[key], str) and key == "strategy":
                node[key] = {"name": node[key]}
            if not isinstance(node[key], dict):
                raise LongbertError(f"override {short_repr(text, 200)}: {key} is not a section")
            node = node[key]
        if keys == ["strategy"] and isinstance(value, str):
            value = {"name": value}
        node[keys[-1]] = value
    return raw
