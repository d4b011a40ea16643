"""Every recipe field that user-facing text names (a string in longbert's code: an error, a hint, a report
sentence) exists, so that no message sends a user to a setting that is not there (compare's verdict once named
`data.test_min_tokens`, which never existed)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import longbert.config.recipe as recipe_schema

PACKAGE = Path(__file__).resolve().parents[2] / "longbert"
SECTIONS = {"data": recipe_schema.DataConfig, "backbone": recipe_schema.BackboneConfig,
            "model": recipe_schema.ModelConfig, "train": recipe_schema.TrainConfig, "eval": recipe_schema.EvalConfig}
# A section name, a dot and a field, not inside a longer dotted name or a path, and not a file name (train.jsonl).
NAMED_FIELD = re.compile(r"(?<![\w./-])(data|backbone|model|train|eval)\.([a-z_]+)(?![\w(/]|\.\w)")
FILE_SUFFIXES = {"jsonl", "json", "yaml", "safetensors", "md", "txt", "csv", "parquet", "png", "html", "gz", "py"}
# Modules whose texts name the pretraining recipe's sections (config/pretrain_recipe.py), which have other fields.
PRETRAINING = {"training/pretraining/pretrain.py", "training/pretraining/mlm.py", "training/pretraining/unlabelled.py",
               "training/pretraining/heldout.py", "config/pretrain_recipe.py", "training/pretraining/masking.py"}


def texts(path: Path) -> list[str]:
    """The string constants of a module (f-strings' literal parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if str(p.relative_to(PACKAGE)) not in PRETRAINING)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_recipe_field_a_message_names_exists(path):
    fields = {section: {f.name for f in dataclasses.fields(cls)} for section, cls in SECTIONS.items()}
    unknown = [f"{section}.{name}" for text in texts(path) for section, name in NAMED_FIELD.findall(text)
               if name not in FILE_SUFFIXES and name not in fields[section]]
    assert not unknown, f"{path.name} names recipe fields that do not exist: {', '.join(sorted(set(unknown)))}"
