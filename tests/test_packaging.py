"""What an installed longbert holds: the wheel built from this checkout ships every recipe of every folder, and
compare's default base recipe is found inside the installed package, not next to a source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import longbert
from longbert.comparison.plan import DEFAULT_RECIPE, default_recipe

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = Path(longbert.__file__).resolve().parent / "recipes"


def recipe_files(folder: Path) -> list[str]:
    """Every recipe under `folder`, subfolders included, as a path relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.yaml"))


def test_the_checkout_recipes_folder_is_the_packaged_one():
    assert default_recipe().resolve() == PACKAGED / DEFAULT_RECIPE
    assert (ROOT / "recipes").resolve() == PACKAGED  # `longbert train recipes/x.yaml` works from a checkout
    assert recipe_files(ROOT / "recipes") == recipe_files(PACKAGED)
    assert {Path(name).parent.name for name in recipe_files(PACKAGED)} == {"", "pretrain", "compare"}


@pytest.mark.slow  # builds a wheel; CI's .ci/package checks the same of the wheel it builds and installs
def test_the_wheel_ships_every_recipe_and_compare_finds_its_default_in_it(tmp_path):
    # Build from a copy, so neither a stale build/ folder nor the checkout's recipes/ link can help.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "longbert", source / "longbert", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("longbert-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("longbert/recipes/")}
        archive.extractall(tmp_path / "installed")
    recipes = recipe_files(PACKAGED)
    assert DEFAULT_RECIPE in recipes
    assert sorted(shipped) == [f"longbert/recipes/{name}" for name in recipes]

    # The unpacked wheel alone on the path, run from a folder with no recipes/ in it: compare's default, and a
    # recipe of each folder by bare name, old and new.
    probe = ("import longbert, longbert.comparison.plan as c, longbert.config as k; p = c.default_recipe(); "
             "print(longbert.__file__); print(p); print(p.read_text().splitlines()[0]); "
             "print(k.load_pretrain_recipe('pretrain_imdb_cpu').name, k.load_pretrain_recipe('imdb_cpu').name, "
             "k.load_recipe('compare_imdb').name, k.load_recipe('imdb_quick').name)")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "installed"))
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    module_file, recipe_file, first_line, names = ran.stdout.splitlines()
    installed = tmp_path / "installed" / "longbert"
    assert Path(module_file) == installed / "__init__.py"
    assert Path(recipe_file) == installed / "recipes" / DEFAULT_RECIPE
    assert first_line == (PACKAGED / DEFAULT_RECIPE).read_text().splitlines()[0]
    assert names.split() == ["pretrain_imdb_cpu", "pretrain_imdb_cpu", "compare_imdb", "imdb_quick"]


def test_a_deprecation_attributed_to_longbert_fails_the_suite_and_a_third_partys_own_does_not():
    """pyproject's filterwarnings: a DeprecationWarning or FutureWarning whose module is longbert's (a library warns
    about the call longbert made) is an error; one about a library's own internals stays quiet."""
    import warnings

    for category in (DeprecationWarning, FutureWarning):
        with pytest.raises(category):
            warnings.warn_explicit("goes away in v6", category, "longbert/modeling/backbone.py", 1,
                                   module="longbert.modeling.backbone")
    warnings.warn_explicit("goes away in v6", DeprecationWarning, "transformers/x.py", 1, module="transformers.x")


def test_dir_lists_the_lazy_api_without_loading_it():
    code = ("import sys, longbert; names = dir(longbert); "
            "print(all(n in names for n in longbert.__all__), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["True", "False"], out.stderr
