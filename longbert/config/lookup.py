"""Finding a recipe: a file, or a packaged recipe by bare name, for the command that asked.

The packaged recipes live in longbert/recipes/ (a checkout shows it as recipes/) by kind, as litgpt's config_hub:
fine-tuning recipes at the top (so `longbert train recipes/imdb_sliding.yaml` works from a checkout), pretraining
recipes in pretrain/, compare's base recipes in compare/. A bare name is looked up in the folders of the command
(train, pretrain or compare), and a packaged recipe of another kind is refused with the command that runs it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from longbert.config.loader import read_yaml, yaml_problem
from longbert.errors import LongbertError

PACKAGED_RECIPES = Path(__file__).resolve().parents[1] / "recipes"
# The recipe folders of each command, its own first. Compare's base recipes are fine-tuning recipes too, so
# `longbert train compare_imdb` runs one, and `compare --recipe imdb_sliding` starts from a fine-tuning recipe.
COMMAND_FOLDERS = {"train": ("", "compare"), "compare": ("compare", ""), "pretrain": ("pretrain",)}
FOLDERS = ("", "compare", "pretrain")
# What each folder holds, and the command line that runs one of its recipes.
FOLDER_KINDS = {"": ("a fine-tuning recipe", "longbert train {}"),
                "compare": ("a compare base recipe", "longbert compare --recipe {}"),
                "pretrain": ("a pretraining recipe", "longbert pretrain {}")}


def packaged_recipes(command: str | None = None) -> dict[str, Path]:
    """The packaged recipes `command` (train, pretrain, compare; None: any) finds by bare name: {name: path}. A
    recipe of the command's own folder goes by its file's stem, one of another folder by <folder>_<stem> (the name
    it had before recipes were sorted into folders: compare_imdb is compare/imdb.yaml)."""
    folders = COMMAND_FOLDERS.get(command, FOLDERS)
    found = {}
    for folder in folders:
        place = PACKAGED_RECIPES / folder
        own = folder == folders[0] or not folder
        for path in sorted(place.glob("*.yaml")) if place.is_dir() else []:
            found[path.stem if own else f"{folder}_{path.stem}"] = path
    return found


def _packaged_file(name: str, command: str | None) -> tuple[Path, str] | None:
    """(path, folder) of the packaged recipe a bare name means, looking in `command`'s folders first and then in the
    others (so that a recipe of another kind is recognised); None when no folder has it."""
    own = COMMAND_FOLDERS.get(command, FOLDERS)
    for folder in own + tuple(f for f in FOLDERS if f not in own):
        stems = [name] + ([name.removeprefix(f"{folder}_")] if folder and name.startswith(f"{folder}_") else [])
        for stem in stems:
            path = PACKAGED_RECIPES / folder / f"{stem}.yaml"
            if path.is_file():
                return path, folder
    return None


def _packaged_folder(path: Path) -> str | None:
    """The packaged recipe folder `path` lies in, or None for a user's own file."""
    parent = path.resolve().parent
    return next((f for f in FOLDERS if parent == (PACKAGED_RECIPES / f).resolve()), None)


def find_recipe(path: str | Path, command: str | None = None) -> Path:
    """The recipe file `path` names for `command` (train, pretrain or compare; None: any): the file itself when it
    exists, else for a bare name ("imdb_sliding" or "imdb_sliding.yaml") the packaged recipe of that name. A
    packaged recipe of another kind (a pretraining recipe given to train, say) is refused, naming the command that
    runs it; a user's own file is checked by its contents when it is validated. Raises LongbertError listing the
    packaged names `command` accepts."""
    given, path = str(path), Path(path)
    folder = None
    if path.is_file():
        folder = _packaged_folder(path)
    elif len(path.parts) == 1 and (found := _packaged_file(path.name.removesuffix(".yaml"), command)):
        path, folder = found
    elif path.is_dir():
        raise LongbertError(f"recipe {path} is a folder; name a recipe file (.yaml) in it")
    else:
        raise LongbertError(f"recipe file not found: {path}; packaged recipes (usable by name): "
                            f"{', '.join(packaged_recipes(command)) or 'none'}")
    if command is not None and folder is not None and folder not in COMMAND_FOLDERS[command]:
        kind, run = FOLDER_KINDS[folder]
        raise LongbertError(f"{given} is {kind} (packaged in recipes/{folder + '/' if folder else ''}): run it with "
                            f"`{run.format(given)}`")
    return path


def read_recipe_file(path: str | Path, command: str | None = None) -> dict:
    """The raw mapping of a YAML recipe (not validated yet), found by `find_recipe(path, command)`; `name` defaults
    to the file's stem. An empty recipe is an error: it would silently train everything on the defaults."""
    path = find_recipe(path, command)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise LongbertError(f"{path} is not UTF-8 text (byte {error.start})") from None
    try:
        raw = read_yaml(text)
    except yaml.YAMLError as error:
        raise LongbertError(f"{path} is not valid YAML: {yaml_problem(error)}") from None
    if raw is None or raw == {}:
        raise LongbertError(f"{path} is empty, and an empty recipe would train on nothing but defaults; write its "
                            f"settings (packaged recipes to start from: "
                            f"{', '.join(packaged_recipes(command)) or 'none'})")
    if not isinstance(raw, dict):
        raise LongbertError(f"{path} must hold a mapping of recipe sections, got {type(raw).__name__}")
    raw.setdefault("name", path.stem)
    return raw
