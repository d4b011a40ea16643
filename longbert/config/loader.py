"""Reading recipes: YAML text -> plain data -> `key.path=value` overrides -> a validated dataclass.

`build` fills any recipe dataclass from plain data and collects every problem with its YAML path, so that one
LongbertError names them all. YAML is read safely and within bounds: no duplicate keys, no alias bombs, and a value
a tag cannot construct is a one-line error. Finding a recipe file (or a packaged one by name) is
longbert.config.lookup's.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from longbert.errors import LongbertError

PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a run or report name: one folder, never a path
# The most values a recipe may expand to through its aliases. The largest packaged recipe has under 100; a YAML
# alias bomb (each list repeating the previous one ten times) passes a billion in 1 KB.
MAX_YAML_VALUES = 100_000
SHORT_REPR = 80


def short_repr(value: Any, limit: int = SHORT_REPR) -> str:
    """`repr(value)`, cut to about `limit` characters: a problem message never prints an unbounded value. Containers
    are walked only as far as the text needs, so a value shared many times over (YAML aliases) costs nothing."""
    parts: list[str] = []
    size = 0

    def emit(text: str) -> bool:
        nonlocal size
        parts.append(text)
        size += len(text)
        return size <= limit

    def walk(item: Any) -> bool:
        if isinstance(item, dict):
            return emit("{") and all((not index or emit(", ")) and walk(key) and emit(": ") and walk(entry)
                                     for index, (key, entry) in enumerate(item.items())) and emit("}")
        if isinstance(item, list):
            return emit("[") and all((not index or emit(", ")) and walk(entry)
                                     for index, entry in enumerate(item)) and emit("]")
        return emit(repr(item))

    if walk(value):
        return "".join(parts)
    return "".join(parts)[:limit] + "..."


def default_strategy_config():
    """The config (with its defaults) of the strategy registered with the default role: a recipe's strategy when it
    names none. Strategy code loads only here, when a recipe is built."""
    from longbert.strategies.registry import get_entry, strategy_with_role

    return get_entry(strategy_with_role("default")).config_cls()


class RecipeCompletion:
    """What a recipe of either kind (`Recipe`, `PretrainRecipe`) fills in when it is built, and how it is given back
    as plain data: the default strategy when none is named, runs/<name> when no output_dir is."""

    def __post_init__(self):
        if self.strategy is None:
            self.strategy = default_strategy_config()
        if self.output_dir is None:
            self.output_dir = str(Path("runs") / self.name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------------------------
# Building dataclasses from plain data, collecting every problem


def _type_problem(value: Any, annotation: Any, path: str) -> tuple[Any, str | None]:
    """Check `value` against a field annotation; returns (possibly converted value, problem or None)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None, None
        inner = [a for a in options if a is not type(None)]
        return _type_problem(value, inner[0], path)
    if origin is typing.Literal:  # a fixed set of strings (ProblemType): typed as a string, the set is checked by
        annotation = str          # the dataclass's problems(), with the one message that names the choices
    if origin is list:
        (item,) = typing.get_args(annotation)
        if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
            return value, f"{path} must be a list of {item.__name__}, got {short_repr(value)}"
        return value, None
    if annotation is float:
        if isinstance(value, str):  # YAML reads 2e-5 (no dot) as a string
            try:
                return float(value), None
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value, f"{path} must be a number, got {short_repr(value)}"
        return float(value), None
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return value, f"{path} must be an integer, got {short_repr(value)}"
        return value, None
    if annotation is bool:
        if not isinstance(value, bool):
            return value, f"{path} must be true or false, got {short_repr(value)}"
        return value, None
    if annotation is str:
        if isinstance(value, bool):  # YAML 1.1 reads a bare `no` as false: `mixed_precision: no` means "no"
            return ("yes" if value else "no"), None
        if not isinstance(value, str):
            return value, f"{path} must be a string, got {short_repr(value)}"
        return value, None
    return value, None


def build(cls: type, raw: Any, path: str, problems: list[str]):
    """Build dataclass `cls` from a mapping, appending every problem (with its YAML path) to `problems`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{path or 'the recipe'} must be a mapping, got {short_repr(raw)}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in raw if k not in fields]
    for key in unknown:
        where = f"{path}.{key}" if path else key
        problems.append(f"unknown recipe key {short_repr(where)}; valid keys{' in ' + path if path else ''}: "
                        f"{', '.join(fields)}")
    values = {}
    for key, value in raw.items():
        if key not in fields:
            continue
        where = f"{path}.{key}" if path else key
        annotation = hints[key]
        if key == "strategy" and annotation is Any:  # a recipe's (or a saved model's) strategy section
            values[key] = build_strategy_config(value, where, problems)
        elif dataclasses.is_dataclass(annotation):
            values[key] = build(annotation, value, where, problems)
        else:
            converted, problem = _type_problem(value, annotation, where)
            if problem:
                problems.append(problem)
            else:
                values[key] = converted
    obj = cls(**values)
    if hasattr(obj, "problems"):
        problems.extend(obj.problems(path))
    return obj


def strategy_fields(strategy: str) -> set[str]:
    """The fields a registered strategy's config holds, besides its name."""
    from longbert.strategies.registry import get_entry

    return {f.name for f in dataclasses.fields(get_entry(strategy).config_cls)} - {"name"}


def strategy_sections(raw: dict, source: str) -> tuple[dict, dict[str, dict]]:
    """(`raw` without its per-strategy sections, strategy -> its section). A recipe may hold a top-level mapping
    named after a strategy, `bigbird: {unit_tokens: 126}`: that strategy's own fields, used whenever it is the
    strategy that runs (`longbert train` merges the section of the recipe's strategy; `longbert compare` that of each
    strategy it compares, as `--set bigbird.unit_tokens=126` would, and a --set override still wins). Every section
    is checked against its strategy's fields, used or not, so that a misspelt field fails before anything trains."""
    from longbert.strategies.registry import strategy_names

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
    from longbert.strategies.registry import strategy_with_role

    rest, own = strategy_sections(raw, source)
    section = rest.get("strategy", {})
    section = {"name": section} if isinstance(section, str) else section
    if isinstance(section, dict):
        name = section.get("name", strategy_with_role("default"))
        if name in own:
            rest["strategy"] = {"name": name, **section, **own[name]}
    return rest


def build_strategy_config(raw: Any, path: str, problems: list[str]):
    """The strategy section: `name` selects the registered config dataclass, the other keys fill it."""
    from longbert.strategies.registry import get_entry

    if isinstance(raw, str):
        raw = {"name": raw}
    if isinstance(raw, dict) and "name" not in raw:  # `--set strategy.window=254` alone: the default strategy's field
        raw = {"name": default_strategy_config().name, **raw}
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"{path} must be a mapping with a `name` (one of `longbert strategies`), got {short_repr(raw)}")
        return default_strategy_config()
    try:
        entry = get_entry(raw["name"])
    except LongbertError as error:
        problems.append(f"{path}.name: {error}")
        return default_strategy_config()
    return build(entry.config_cls, raw, path, problems)


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
    parts = [(where, group) for where, group in ((OVERRIDES, from_set), (source, rest)) if group]
    return "; ".join(f"{where}: {'; '.join(group)}" if len(group) == 1
                     else f"{where} has {len(group)} problems: {'; '.join(group)}" for where, group in parts)


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


# --------------------------------------------------------------------------------------------------------------
# Overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.learning_rate=2e-5` -> (['train', 'learning_rate'], 2e-05); values are read as YAML."""
    if "=" not in text:
        raise LongbertError(f"override {short_repr(text, 200)} must look like key.path=value")
    key, value = text.split("=", 1)
    if not key.strip():
        raise LongbertError(f"override {short_repr(text, 200)} has an empty key")
    try:
        parsed = read_yaml(value) if value.strip() else None
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
