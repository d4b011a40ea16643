"""The README's layout section stays true: every module is listed there, and imports run the way it says."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "longbert"
MODULES = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))


def layout_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Layout") :]


@pytest.mark.parametrize("module", MODULES, ids=str)
def test_every_module_is_in_the_readme_layout(module):
    assert re.search(rf"(?<![\w/]){re.escape(module.name)}(?!\w)", layout_section()), f"{module} is not in the README's layout"


def longbert_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every `from longbert... import ...` and `import longbert...` in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("longbert"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("longbert")]
    return out


def test_no_module_imports_another_modules_private_names():
    found = [f"{path.relative_to(ROOT)}: {module}.{name}" for path in PACKAGE.rglob("*.py")
             for module, names in longbert_imports(path) for name in names if name.startswith("_") and not name.endswith("__")]
    assert not found


@pytest.mark.parametrize("importer, forbidden", [
    ("strategies", ("longbert.training.finetune", "longbert.training.checkpoint", "longbert.training.runs", "longbert.evaluation.command",
                    "longbert.comparison.run", "longbert.modeling.classifier", "longbert.config")),
    ("training.py", ("longbert.comparison.run", "longbert.inference.attribution", "longbert.comparison.results", "longbert.comparison.render",
                     "longbert.comparison.speed", "longbert.comparison.statistics")),
    ("frozen.py", ("longbert.training.finetune",)),
])
def test_imports_run_one_way(importer, forbidden):
    paths = sorted((PACKAGE / importer).rglob("*.py")) if (PACKAGE / importer).is_dir() else [PACKAGE / importer]
    found = [f"{p.relative_to(ROOT)} imports {m}" for p in paths for m, _ in longbert_imports(p) if m.startswith(forbidden)]
    assert not found


def test_loading_the_settings_loads_no_strategy_code():
    code = "import sys, longbert.config; print(sorted(m for m in sys.modules if m.split('.')[0] in ('longbert', 'torch')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "longbert.config" in loaded
    assert "longbert.strategies" not in loaded and "'torch'" not in loaded
