"""The house keeps its shape: every module is in docs/architecture.md, modules stay small, imports run one way and
never in a circle, and only strategies/ knows a strategy by name."""

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
SUBPACKAGES = sorted(p.parent.relative_to(PACKAGE) for p in PACKAGE.rglob("*/__init__.py"))
ROOMS = sorted(p.parent.relative_to(PACKAGE) for p in PACKAGE.glob("*/__init__.py"))  # the top-level subpackages
MAX_LINES = 400
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = ("longbert", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
            for sub in ast.walk(node)}


def longbert_imports(path: Path, top_level_only: bool = False,
                     skip_type_checking: bool = False) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every `from longbert... import ...` and `import longbert...` in a file; with
    `top_level_only`, only those that run when the module is imported (not inside functions or TYPE_CHECKING); with
    `skip_type_checking`, every one that can run (TYPE_CHECKING's left out)."""
    tree = ast.parse(path.read_text())
    nodes = list(ast.walk(tree))
    if top_level_only:
        nodes = [n for n in tree.body if not (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n.test))]
        nodes = [sub for n in nodes for sub in ast.walk(n) if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    elif skip_type_checking:
        skipped = _type_checking_nodes(tree)
        nodes = [n for n in nodes if id(n) not in skipped]
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("longbert"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("longbert")]
    return out


def late_imports(path: Path) -> list[ast.stmt]:
    """The longbert imports inside functions of a file."""
    tree = ast.parse(path.read_text())
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("longbert")) or (
                        isinstance(node, ast.Import) and any(a.name.startswith("longbert") for a in node.names)):
                    found.append(node)
    return sorted({id(n): n for n in found}.values(), key=lambda n: n.lineno)


def architecture_page() -> str:
    return (ROOT / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize("module", MODULES, ids=str)
def test_every_module_is_on_the_architecture_page(module):
    page = architecture_page()
    name = module.name if module.name != "__init__.py" else f"{module.parent}/"
    assert re.search(rf"(?<![\w]){re.escape(name)}(?!\w)", page), f"{module} is not in docs/architecture.md"


@pytest.mark.parametrize("module", MODULES, ids=str)
def test_no_module_is_over_the_size_limit(module):
    lines = len((PACKAGE / module).read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES}: split it by concern)"


def test_no_function_is_over_the_length_limit():
    """Each function reads on one screen: a longer flow is a short function calling named steps."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
             for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(found)


@pytest.mark.parametrize("subpackage", SUBPACKAGES, ids=str)
def test_every_subpackage_says_what_it_holds(subpackage):
    """Its __init__ opens with one sentence, and the architecture page gives it a section."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / subpackage / "__init__.py").read_text())) or ""
    first = docstring.split("\n\n")[0].replace("\n", " ")
    assert first.endswith((".", ":")) and 20 <= len(first) <= 240, f"{subpackage}/__init__.py: {first!r}"
    assert f"### `{subpackage.name}/`" in architecture_page()


def test_no_module_imports_another_modules_private_names():
    found = [f"{path.relative_to(ROOT)}: {module}.{name}" for path in PACKAGE.rglob("*.py")
             for module, names in longbert_imports(path) for name in names
             if name.startswith("_") and not name.endswith("__")]
    assert not found


def test_no_import_cycle():
    """No two modules need each other, counting imports inside functions: moving an import into a function is not a
    way past this test (only imports under TYPE_CHECKING, which never run, are left out)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for module, names in longbert_imports(path, skip_type_checking=True):
            for candidate in [f"{module}.{n}" for n in names] + [module]:
                if candidate in paths and candidate != name:
                    targets.add(candidate)
                    break
        graph[name] = targets
    # Packages import their modules' names from __init__ on purpose; a cycle through a package's __init__ that only
    # re-exports is still a cycle, so nothing is exempt.
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# Why an import may sit inside a function; each such import says one of these on its line (# noqa: PLC0415 (...)):
# a module that must load no torch (config, the CLI's start-up), an optional extra (export, serve), the strategy
# registry asked from torch-free config, the transformers import hook's order, a torch module torch deprecates. The
# CLI's commands import their library inside the command (`longbert --help` loads no torch) and are exempt as a file
# in pyproject.toml.
LATE_IMPORT_REASONS = ("torch-free", "optional extra", "registry", "import hook", "deprecated")


def test_imports_inside_functions_say_why():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "cli.py" and path.parent == PACKAGE:
            continue
        lines = path.read_text().splitlines()
        for node in late_imports(path):
            line = lines[node.lineno - 1]
            if not ("noqa: PLC0415" in line and any(reason in line for reason in LATE_IMPORT_REASONS)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {line.strip()}")
    assert not found, f"imports inside functions without one of the reasons {LATE_IMPORT_REASONS}:\n" + "\n".join(found)


def test_no_two_subpackages_import_each_other():
    """Imports inside functions count too: they keep `import longbert` light, but a tie they hide is a tie. The
    modules at the package's root (the CLI, errors) stand outside the rooms and are not counted."""
    rooms = {str(s) for s in ROOMS}
    edges: dict[tuple[str, str], str] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) < 2:
            continue
        for module, _ in longbert_imports(path):
            target = module.split(".")[1] if module.count(".") else ""
            if target in rooms and target != parts[0]:
                edges.setdefault((parts[0], target), f"{path.relative_to(ROOT)} imports {module}")
    ties = {frozenset(pair): f"{edges[pair]}; {edges[pair[::-1]]}" for pair in edges if pair[::-1] in edges}
    assert ties == {}


@pytest.mark.parametrize("importer, forbidden", [
    ("strategies", ("longbert.training", "longbert.evaluation", "longbert.comparison", "longbert.modeling",
                    "longbert.config", "longbert.inference")),
    ("config", ("longbert.training", "longbert.evaluation", "longbert.comparison", "longbert.modeling",
                "longbert.inference")),
    ("training", ("longbert.comparison", "longbert.inference", "longbert.ensembles")),
    ("ensembles", ("longbert.comparison", "longbert.inference")),
    ("modeling", ("longbert.training", "longbert.evaluation", "longbert.comparison", "longbert.inference")),
    ("training/frozen.py", ("longbert.training.finetune",)),
    ("utils", ("longbert.config", "longbert.data", "longbert.modeling", "longbert.training", "longbert.strategies",
               "longbert.evaluation", "longbert.inference", "longbert.comparison", "longbert.hf")),
])
def test_imports_run_one_way(importer, forbidden):
    base = PACKAGE / importer
    paths = sorted(base.rglob("*.py")) if base.is_dir() else [base]
    found = [f"{p.relative_to(ROOT)} imports {m}" for p in paths for m, _ in longbert_imports(p)
             if m.startswith(forbidden)]
    assert not found


def test_no_strategy_is_named_outside_strategies():
    """Code outside strategies/ asks the registry (roles, hooks); it never compares with a strategy's name.
    Docstrings and comments may name strategies; string constants in code may not."""
    from longbert.strategies.registry import strategy_names

    names = set(strategy_names())
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "strategies" in path.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                named = names & set(re.findall(r"[a-z]+", node.value))
                if named and node.value.strip() in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found


@pytest.mark.parametrize("code", ["import longbert.config", "import longbert; longbert.Recipe()",
                                  "import longbert; longbert.load_recipe('imdb_sliding', ['strategy.window=300'])",
                                  "import longbert; longbert.ChunkConfig(pooling='max')"])
def test_settings_load_no_strategy_code_and_no_torch(code):
    """A recipe, built in Python or read from YAML, and a strategy's config need only the strategies' settings
    (strategies/configs.py), not their modules, nor torch."""
    code += "; import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('longbert', 'torch')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "'longbert.strategies.configs'" in loaded
    strategy_modules = re.findall(r"'longbert\.strategies\.(\w+)'", loaded)
    assert strategy_modules == ["configs"] and "'torch'" not in loaded


def test_no_internal_issue_numbers_in_the_repository():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    found = []
    for name in tracked.splitlines():
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".yaml", ".toml", ".txt", "") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"\bissues? ?#?\d+\b", line, re.IGNORECASE):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
