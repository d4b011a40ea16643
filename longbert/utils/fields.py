"""Dataclass fields with help texts, and the validation helpers that recipes, strategy configs and saved model
settings share. No other longbert module is imported here, so any layer can use it."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def option(default: Any, help: str, **kwargs) -> Any:
    """A dataclass field with a one-line help text (shown by `longbert strategies` and in recipe errors)."""
    if "default_factory" in kwargs:
        return field(metadata={"help": help}, **kwargs)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


def one_of(path: str, value: Any, choices) -> list[str]:
    """A validation problem (as a one-item list) when `value` is not among `choices`; `path` is its YAML path."""
    return [] if value in choices else [f"{path} must be one of {', '.join(choices)}, got {value!r}"]
