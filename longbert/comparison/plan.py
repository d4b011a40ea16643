"""What a comparison will run, decided before anything trains: the strategies named (checked against the registry),
its base recipe (the one given; else, packaged, compare/own_data.yaml for the user's own documents and
compare/imdb.yaml for an IMDb subset) and its report name, one validated recipe per strategy (the base recipe, the
strategy, and the overrides that reach it), what each run folder allows (reuse, resume, train), and a build of every
model about to train so that a setting the backbone cannot hold fails at once. Every problem of every strategy is
raised together. And the `longbert compare` command that repeats a call from Python."""

from __future__ import annotations

import copy
import dataclasses
import shlex
from importlib import resources
from pathlib import Path
from typing import Literal, Sequence

from longbert.config import (
    PLAIN_NAME,
    Recipe,
    apply_overrides,
    load_recipe,
    parse_override,
    read_recipe_file,
    recipe_differences,
    recipe_from_dict,
    recipe_to_yaml,
    strategy_fields,
    strategy_sections,
)
from longbert.config.data import local_data_name
from longbert.data.files import count_rows
from longbert.data.sources import single_data_file
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.strategies.registry import get_entry, strategy_names
from longbert.training.frozen import refuse_untrainable
from longbert.utils.folders import STATE_FILE, RunFolder
from longbert.utils.hardware import release_memory

# What a strategy's run folder allows, decided when its turn comes (`plan_runs`).
PlanAction = Literal["reuse", "resume", "restart", "train"]
DEFAULT_RECIPE = "compare/imdb.yaml"  # the base recipe when none is given and the documents are IMDb's
OWN_DATA_RECIPE = "compare/own_data.yaml"  # ... and when they are the user's own: every document, no caps
OWN_DATA_REPORT = "compare_{}"  # the report name on the user's own file or folder: compare_reviews for reviews.csv
DEFAULT_RUNS_DIR = Path("runs") / "compare"
DEFAULT_REPORTS_DIR = Path("reports")


def parse_strategies(value: Sequence[str] | str) -> list[str]:
    """'truncate,chunk' or ['truncate', 'chunk'] -> checked names (order kept); a name given twice is refused."""
    items = value.split(",") if isinstance(value, str) else [part for v in value for part in str(v).split(",")]
    given = [s.strip() for s in items if s.strip()]
    if given and len(given) < len(items):  # ',truncate' or 'truncate,,chunk': a name left out, or a comma too many
        raise LongbertError(f"--strategies {','.join(items)!r} has an empty name between its commas; name each "
                            "strategy once, e.g. truncate,chunk")
    names = list(dict.fromkeys(given))
    if len(names) < len(given):
        twice = next(s for i, s in enumerate(given) if s in given[:i])
        raise LongbertError(f"--strategies names {twice} twice; each strategy is one row of the report (--seeds N "
                            "trains one several times)")
    if not names:
        raise LongbertError(f"--strategies needs at least one name; valid strategies: {', '.join(strategy_names())}")
    unknown = [s for s in names if s not in strategy_names()]
    if len(unknown) == 1:
        get_entry(unknown[0])  # raises, listing the valid names
    if unknown:
        raise LongbertError(f"unknown strategies {', '.join(repr(s) for s in unknown)}; "
                            f"valid strategies: {', '.join(strategy_names())}")
    return names


def default_recipe(relative: str = DEFAULT_RECIPE) -> Path:
    """A base recipe packaged with longbert (longbert/recipes/, which a checkout also shows as recipes/): by default
    compare/imdb.yaml, the one used when none is given and no override sets data.path."""
    packaged = resources.files("longbert").joinpath("recipes", relative)
    if not packaged.is_file():
        raise LongbertError(f"the base recipe {relative} is missing from this longbert installation; pass --recipe")
    return Path(str(packaged))


def data_path_override(overrides) -> str | None:
    """The data.path the overrides set (the last one that does), or None."""
    found = None
    for text in overrides:
        keys, value = parse_override(text)
        if keys == ["data", "path"] and isinstance(value, str):
            found = value
    return found


def base_recipe(recipe, overrides=(), data=None) -> tuple[dict, str, Path | None]:
    """(raw recipe mapping, a name for error messages and the report, the YAML path or None) of a compare's base:
    `recipe` (a YAML path or a Recipe); None: compare/own_data.yaml when the documents are the user's own (an override
    sets data.path, or `data` holds them in memory), else compare/imdb.yaml."""
    if isinstance(recipe, Recipe):
        return recipe.to_dict(), "the base recipe", None
    if recipe is None:  # named as a checkout shows it, wherever longbert is installed
        own = data is not None or data_path_override(overrides) is not None
        relative = OWN_DATA_RECIPE if own else DEFAULT_RECIPE
        return read_recipe_file(default_recipe(relative)), f"recipes/{relative}", None
    path = Path(recipe)
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())  # what the report shows: recipes/x.yaml, not a home folder
    return read_recipe_file(path), str(path), path


def report_name(name: str | None, recipe, overrides=(), data=None) -> str:
    """The report name a compare takes: `name`; else, on the user's own local file or folder with no base recipe
    given, compare_<its stem> (compare_reviews for reviews.csv); else the base recipe's. Refused unless it is a
    plain folder name."""
    path = data_path_override(overrides) if recipe is None else None
    own = local_data_name(path) if path is not None else None
    if name is not None and not name.strip():  # once it became the default's name: a committed report replaced
        raise LongbertError("--name is empty; give the report a name, or leave --name out for the default")
    name = name or (OWN_DATA_REPORT.format(own) if own else str(base_recipe(recipe, overrides, data)[0].get("name")
                                                                or "compare"))
    if not PLAIN_NAME.match(name):
        raise LongbertError(f"--name {name!r} must be a plain folder name (letters, digits, '.', '_', '-')")
    return name


def describe_base(base_source: str, recipe, defaulted: bool) -> str:
    """compare's status line on its base recipe: which one, how many documents it uses (`recipe`: the first
    strategy's, whose data every run shares), and how to change that; `defaulted`: no base recipe was given."""
    data = recipe.data
    try:
        file = single_data_file(data)
    except LongbertError:  # a path that does not exist: the runs say so, in their own words
        file = None
    rows = count_rows(file) if file is not None else None
    test_cap = data.max_eval_documents if data.max_test_documents is None else data.max_test_documents
    longer = f" longer than {data.test_longer_than} tokens" if data.test_longer_than else ""
    if data.max_train_documents or test_cap or longer:
        train = f"at most {data.max_train_documents:,}" if data.max_train_documents else "all"
        test = f"at most {test_cap:,}" if test_cap else "all"
        used = f"{train} training documents and {test} test documents{longer} of {data.path}"
    else:
        used = f"all {'' if rows is None else f'{rows:,} '}documents of {data.path}"
    if file is not None:
        used += (", cut into train, validation and test" if data.test_split else ", cut into train and validation")
        used += " (each run's data-split.json)"
    if not defaulted:
        change = "--set data.<field>=VALUE changes what it uses"
    elif base_source.endswith(OWN_DATA_RECIPE):
        change = "--set data.max_train_documents=N caps training; --recipe FILE starts from another base recipe"
    else:
        change = "--set data.path=FILE compares on your own documents (all of them); --recipe FILE on another base"
    return f"base recipe {base_source}: {used}; {change}"


def split_overrides(overrides: list[str], names: list[str]) -> dict[str, list[str]]:
    """Each strategy's own list of `key.path=value` overrides, in the order given (see
    `longbert.comparison.orchestrator`). Every override is read by `config.parse_override`, the parser `longbert train
    --set` uses, so a malformed one fails here, once, before any strategy is resolved."""
    recipe_keys = {f.name for f in dataclasses.fields(Recipe)}
    per: dict[str, list[str]] = {s: [] for s in names}
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] in ("name", "output_dir"):
            raise LongbertError(f"override {text!r}: compare names the runs itself; use --name (and runs_dir)")
        if keys[0] == "strategy":
            if len(keys) == 1 or keys[1] == "name":
                raise LongbertError(f"override {text!r}: compare sets strategy.name itself; "
                                    "list strategies with --strategies")
            having = [s for s in names if keys[1] in strategy_fields(s)]
            if not having:
                known = sorted(set().union(*(strategy_fields(s) for s in names)))
                raise LongbertError(f"override {text!r}: none of {', '.join(names)} has a field {keys[1]!r}; "
                                    f"their fields: {', '.join(known)}")
            for s in having:
                per[s].append(text)
        elif keys[0] not in recipe_keys and keys[0] in strategy_names():
            if len(keys) == 1 or keys[1] == "name":
                raise LongbertError(f"override {text!r} must name a field: {keys[0]}.<field>=value")
            if keys[0] in per:  # settings for a strategy that is not being compared are ignored
                # <strategy>.<field>=value becomes strategy.<field>=value: only the leading key is renamed
                per[keys[0]].append("strategy" + text.lstrip()[len(keys[0]):])
        else:
            for s in names:
                per[s].append(text)
    return per


def resolve_recipes(names: list[str], base_raw: dict, base_source: str, overrides: list[str], name: str,
                    runs_dir: Path, suffix: str = "") -> dict:
    """strategy -> its validated Recipe, run in <runs_dir>/<name>/<strategy><suffix>. Every problem of every strategy
    is raised together, before training."""
    per = split_overrides(overrides, names)
    base_raw, own = strategy_sections(base_raw, base_source)
    recipes, problems = {}, {}
    for strategy in names:
        raw = copy.deepcopy(base_raw)
        section = raw.get("strategy")
        base_strategy = section.get("name") if isinstance(section, dict) else section
        if base_strategy != strategy or not isinstance(section, dict):
            raw["strategy"] = {"name": strategy}
        raw["strategy"].update(own.get(strategy, {}))
        try:
            raw = apply_overrides(raw, per[strategy])
            raw["name"] = f"{name}-{strategy}{suffix}"
            raw["output_dir"] = str(runs_dir / name / f"{strategy}{suffix}")
            recipes[strategy] = recipe_from_dict(raw, base_source, per[strategy])
        except LongbertError as error:
            problems.setdefault(str(error), []).append(strategy)
            continue
        if not recipes[strategy].data.test_split:
            problems.setdefault("compare reports on the test split; data.test_split must name one", []).append(strategy)
    _raise_problems(problems, names)
    return recipes


def _raise_problems(problems: dict[str, list[str]], names: list[str]) -> None:
    """One LongbertError for {message: strategies it concerns}; a message shared by every strategy is said once."""
    if problems:
        raise LongbertError(" | ".join(message if len(found) == len(names) else f"{', '.join(found)}: {message}"
                                       for message, found in problems.items()))


def preflight(recipes: dict, plan: dict[str, str]) -> None:
    """Build each model that is about to train (backbone loaded, strategy fitted to it) so that a setting the
    backbone cannot hold (a window longer than its positions), or a strategy weight that frozen mode cannot train,
    fails before the first strategy trains."""
    problems: dict[str, list[str]] = {}
    for strategy, recipe in recipes.items():
        if plan[strategy] == "reuse":
            continue
        try:
            model = LongDocumentClassifier.from_recipe(recipe, ["a", "b"])
            if model.frozen:
                refuse_untrainable(model)  # a strategy weight frozen mode cannot train fails here, not mid-compare
            del model
        except LongbertError as error:
            problems.setdefault(str(error), []).append(strategy)
    release_memory()
    _raise_problems(problems, list(recipes))


def plan_runs(recipes: dict) -> dict[str, PlanAction]:
    """strategy -> 'reuse', 'resume', 'restart' or 'train', from what its run folder holds. A folder holding a run
    with a different recipe is an error (raised for every such folder at once, before anything trains)."""
    plan: dict[str, PlanAction] = {}
    problems = []
    for strategy, recipe in recipes.items():
        run, run_dir = RunFolder(recipe.output_dir), Path(recipe.output_dir)
        saved = run.recipe
        if not run_dir.exists() or not any(run_dir.iterdir()):
            plan[strategy] = "train"
        elif not saved.is_file():
            problems.append(f"{run_dir} is not empty and holds no recipe.yaml; move it away or choose another --name")
        elif _read(saved) != recipe_to_yaml(recipe) and not _same_once_loaded(saved, recipe):
            differing = recipe_differences(saved, recipe)
            problems.append(f"{run_dir} holds a run with a different recipe ({differing}); choose another --name, "
                            "or delete that folder to train it again")
        elif run.metrics.is_file():
            plan[strategy] = "reuse"
        elif (run.checkpoint / STATE_FILE).is_file():
            plan[strategy] = "resume"
        else:
            plan[strategy] = "restart"
    if problems:
        raise LongbertError(" | ".join(problems))
    return plan


def _same_once_loaded(saved: Path, recipe) -> bool:
    """Whether a saved recipe.yaml, loaded as today's longbert loads a recipe, is `recipe`: a run saved before a
    setting existed did what that setting's default does (every new setting defaults to the old behaviour), so a
    recipe.yaml that lacks it is the same recipe. False when the file cannot be loaded."""
    try:
        return recipe_to_yaml(load_recipe(saved)) == recipe_to_yaml(recipe)
    except (LongbertError, OSError, UnicodeDecodeError):
        return False


def _read(saved: Path) -> str | None:
    """A saved recipe.yaml's text; None when it cannot be read as text (`recipe_differences` says why)."""
    try:
        return saved.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def seed_recipes(recipes: dict, seeds: int, base_raw: dict, base_source: str, overrides: list[str], name: str,
                 runs_dir: Path) -> dict[str, dict[int, object]]:
    """strategy -> {seed: Recipe} for `compare --seeds N`: each strategy's recipe (`recipes`, at the base seed s0)
    and N - 1 more at seeds s0 + 1 ... s0 + N - 1, in <strategy>-seed<k>/ beside it. Only the seed differs: the
    extra runs pin data.seed to the data seed of the base run, so every seed trains, selects and is tested on the
    same documents, and the base-seed run is the single-seed comparison's run (reused when it exists)."""
    if seeds < 1:
        raise LongbertError(f"--seeds must be at least 1, got {seeds}")
    first = next(iter(recipes.values()))
    base_seed = first.seed
    data_seed = first.data.seed if first.data.seed is not None else base_seed
    out: dict[str, dict[int, object]] = {s: {base_seed: r} for s, r in recipes.items()}
    for seed in range(base_seed + 1, base_seed + seeds):
        extra = resolve_recipes(list(recipes), base_raw, base_source,
                                [*overrides, f"seed={seed}", f"data.seed={data_seed}"], name, runs_dir,
                                suffix=f"-seed{seed}")
        for strategy, recipe in extra.items():
            out[strategy][seed] = recipe
    return out


def equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir, seeds=1) -> str:
    """The `longbert compare` command that repeats a library call."""
    parts = ["longbert", "compare", "--strategies", ",".join(names)]
    if seeds != 1:
        parts += ["--seeds", str(seeds)]
    if base_path is not None and recipe is not None:
        parts += ["--recipe", str(base_path)]
    for text in overrides:
        parts += ["--set", text]
    parts += ["--name", name]
    if runs_dir != DEFAULT_RUNS_DIR:
        parts += ["--runs-dir", str(runs_dir)]
    if reports_dir != DEFAULT_REPORTS_DIR:
        parts += ["--reports-dir", str(reports_dir)]
    command = shlex.join(parts)
    if base_path is None and recipe is not None:
        command += "  # called from Python with a Recipe object as the base"
    return command
