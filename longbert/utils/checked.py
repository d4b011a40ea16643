"""Settings that check themselves: the machinery every settings dataclass of longbert shares, a recipe's sections
(longbert.config) and each strategy's config (longbert.strategies.configs) alike. A `Validated` dataclass checks
itself when constructed in Python, and again through `dataclasses.replace`: the type of each field
(`type_problem`), then nested sections, then its own `problems(path)`; one LongbertError names every problem. While
settings are filled from plain data (`building`, longbert.config.validation's `build`), it leaves the check to
the builder, which collects every problem once.

A leaf: it imports nothing of longbert but its error type, so that config/ and strategies/ both build on it without
importing each other.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Protocol, runtime_checkable

from longbert.errors import LongbertError

SHORT_REPR = 80
RECIPE = "recipe"  # where a problem of settings built in Python is said to come from
# Set while `build` fills dataclasses from plain data: it collects every problem itself, once.
_BUILDING: ContextVar[bool] = ContextVar("longbert_building_settings", default=False)


@runtime_checkable
class StrategyConfig(Protocol):
    """What a recipe's `strategy` holds: the config dataclass of a registered strategy (TruncateConfig, ChunkConfig,
    SlidingConfig, BigBirdConfig, RecurrenceConfig, RmtConfig in longbert.strategies), which its `name` selects."""

    name: str

    def problems(self, path: str) -> list[str]: ...


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


def one_line(source: str, problems: list[str]) -> str:
    """Problems from one source as one line: 'SOURCE: problem' or 'SOURCE has N problems: a; b'."""
    return (f"{source}: {problems[0]}" if len(problems) == 1
            else f"{source} has {len(problems)} problems: {'; '.join(problems)}")


def type_problem(value: Any, annotation: Any, path: str) -> tuple[Any, str | None]:
    """Check `value` against a field annotation; returns (possibly converted value, problem or None)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None, None
        inner = [a for a in options if a is not type(None)]
        return type_problem(value, inner[0], path)
    if origin is typing.Literal:  # a fixed set of strings (ProblemType): typed as a string, the set is checked by
        annotation = str          # the dataclass's problems(), with the one message that names the choices
    if origin is list:
        (item,) = typing.get_args(annotation)
        value = list(value) if isinstance(value, tuple) else value  # Python's tuple is YAML's list
        if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
            return value, f"{path} must be a list of {item.__name__}, got {short_repr(value)}"
        if item is float and not all(math.isfinite(v) for v in value):
            return value, f"{path} must be a list of finite numbers, got {short_repr(value)}"
        return value, None
    if annotation is float:
        number = value
        if isinstance(value, str):  # YAML reads 2e-5 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return value, f"{path} must be a number, got {short_repr(value)}"
        if not math.isfinite(number):  # nan or inf trains a model of NaNs, or never stops
            return value, f"{path} must be a finite number, got {short_repr(value)}"
        return float(number), None
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


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's field annotations, resolved (its module writes them as strings)."""
    return typing.get_type_hints(cls)


def is_section(annotation: Any) -> bool:
    """Whether a field holds a section of its own: a settings dataclass, or a strategy's config."""
    return annotation is StrategyConfig or (isinstance(annotation, type) and dataclasses.is_dataclass(annotation))


def settings_problems(settings: Any, path: str) -> list[str]:
    """Every problem of a settings dataclass built in Python, each with its YAML path under `path`: a field of the
    wrong type (converted where YAML's would be: an int where a number goes, a tuple where a list goes), then the
    nested sections' problems, then its own `problems(path)`, read with each wrongly typed field at its default (as
    `build` leaves a value it refuses)."""
    out: list[str] = []
    defaults: dict[str, Any] = {}
    hints = field_types(type(settings))
    for field in dataclasses.fields(settings):
        where = f"{path}.{field.name}" if path else field.name
        value, annotation = getattr(settings, field.name), hints[field.name]
        if is_section(annotation):
            if isinstance(value, annotation):
                out += settings_problems(value, where)
                continue
            what = ("a strategy's config (ChunkConfig(...)) or name" if annotation is StrategyConfig
                    else f"a {annotation.__name__}")
            problem = f"{where} must be {what}, got {short_repr(value)}"
        else:
            converted, problem = type_problem(value, annotation, where)
            if problem is None and converted is not value:
                object.__setattr__(settings, field.name, converted)
        if problem is not None:
            out.append(problem)
            defaults[field.name] = (field.default_factory() if field.default_factory is not dataclasses.MISSING
                                    else field.default)
    if hasattr(settings, "problems"):
        checked = copy.copy(settings)  # a copy is made without __init__: nothing is checked twice
        for name, value in defaults.items():
            object.__setattr__(checked, name, value)
        out += checked.problems(path)
    return out


class Validated:
    """A settings dataclass that checks itself when constructed in Python (and through `dataclasses.replace`), as a
    recipe read from YAML is checked: one LongbertError, 'recipe: train.epochs must be >= 1, got 0', naming every
    problem (see `settings_problems`). SECTION: where the section sits in a recipe, the path its problems are named
    under when it is built alone ('' for a whole recipe)."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self):
        self.check()

    def check(self, found: list[str] | tuple[str, ...] = ()) -> None:
        """Raise one LongbertError naming `found` and every problem of these settings as they stand; nothing while
        `build` fills them from plain data (it collects the problems itself)."""
        if _BUILDING.get():
            return
        problems = list(dict.fromkeys([*found, *settings_problems(self, self.SECTION)]))  # each once, in order
        if problems:
            raise LongbertError(one_line(RECIPE, problems))



@contextmanager
def building():
    """While `build` fills dataclasses from plain data, a Validated one does not check itself when constructed."""
    token = _BUILDING.set(True)
    try:
        yield
    finally:
        _BUILDING.reset(token)
