"""Recipes: YAML -> overrides -> validated dataclasses, for fine-tuning and pretraining."""

from longbert.config.schema_all import *  # noqa: F401,F403
