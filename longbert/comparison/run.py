"""Compare strategies: train each named strategy on the same data, backbone, seed and budget, measure what each
one costs, and write one report that says which to use (reports/<name>/report.md, report.html, results.json).

    import longbert
    results = longbert.compare(["truncate", "chunk"], "recipes/compare_imdb.yaml", ["train.epochs=2"])
    results["strategies"]["chunk"]["accuracy"]

Each strategy's recipe is resolved as
    the base recipe (`recipe`, or recipes/compare_imdb.yaml, packaged with longbert)
    + strategy.name=<s>   (the base's strategy settings are kept when its strategy is <s>; others start from
                           their defaults)
    + the overrides, in order:
          key.path=value             every strategy (data, backbone, seed, train, eval, model)
          strategy.<field>=value     every strategy whose config has <field> (e.g. strategy.pooling=attention)
          <strategy>.<field>=value   that strategy only (e.g. truncate.max_tokens=254)
Per-strategy overrides reach only the strategy section, so data, seed, backbone and budget are the same for all.

Run folders are ordinary run folders (usable by `longbert predict` and `longbert evaluate`) under
<runs_dir>/<name>/<strategy>/. A repeated or interrupted compare picks up where it stopped:
    metrics.json and the same resolved recipe        -> reused, not trained again
    a checkpoint, no metrics.json, the same recipe   -> training continues from the checkpoint
    the same recipe but nothing to continue from     -> trained again from the start
    a different recipe                               -> an error before any training (choose another name, or
                                                        delete the folder to retrain)
Besides what `train` writes, each run folder gets speed-by-length.json: inference speed and peak memory per length
bucket, measured once on this machine and reused while the machine description is the same.

This module plans and runs; the rest of a comparison lives beside it:
    longbert.comparison.speed        speed and memory by document length (measured, cached in the run folder)
    longbert.inference.attribution     error analysis: which long documents, which part of each decided, text excerpts
    longbert.comparison.statistics   Wilson intervals and the exact McNemar test (scipy)
    longbert.comparison.results      prediction rows and the results dict (results.json) that longbert.comparison.render renders
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

from longbert.errors import LongbertError
from longbert.comparison.results import LONG_TOKENS

DEFAULT_RECIPE = "compare_imdb.yaml"
DEFAULT_RUNS_DIR = Path("runs") / "compare"
DEFAULT_REPORTS_DIR = Path("reports")


def _say(message: str) -> None:
    print(f"compare: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------------
# The library entry point


def compare(
    strategies: Sequence[str] | str,
    recipe=None,
    overrides: Iterable[str] = (),
    name: str | None = None,
    *,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
    reports_dir: str | Path = DEFAULT_REPORTS_DIR,
    command: str | None = None,
    speed_documents: int = 48,
    examples: int = 6,
    long_tokens: int = LONG_TOKENS,
    data=None,
) -> dict:
    """Train (or reuse) one run per strategy and write the comparison report.

    strategies: names from the registry (a list, or one comma-separated string); all are checked before any
        training, unknown ones raise LongbertError listing the valid names.
    recipe: the base recipe: a YAML path, a Recipe, or None for compare_imdb.yaml (packaged with longbert).
    overrides: `key.path=value` strings (see the module docstring for the per-strategy forms).
    name: the report's name (reports/<name>/, <runs_dir>/<name>/); default: the base recipe's name.
    speed_documents: at most this many test documents per length bucket are timed for the speed plot.
    examples: at most this many long documents in the error analysis; long_tokens: what counts as long.
    data: documents in memory for every run instead of data.path (see `longbert.train`'s `data`).
    Returns the results dict that results.json holds (every number in the report), with `report` giving the
    written files."""
    from longbert.comparison import render as report_module
    from longbert.inference.attribution import build_examples, decisive_units, select_examples
    from longbert.comparison.baseline import BASELINE, prediction_rows
    from longbert.utils.hardware import describe_machine
    from longbert.comparison.results import assemble_results, read_predictions
    from longbert.comparison.speed import cached_speed, measure_speed_by_length, save_speed

    names = parse_strategies(strategies)
    overrides = list(overrides)
    base_raw, base_source, base_path = _base_recipe(recipe)
    name = name or str(base_raw.get("name") or "compare")
    from longbert.config import PLAIN_NAME

    if not PLAIN_NAME.match(name):
        raise LongbertError(f"--name {name!r} must be a plain folder name (letters, digits, '.', '_', '-')")
    runs_dir, reports_dir = Path(runs_dir), Path(reports_dir)
    recipes = resolve_recipes(names, base_raw, base_source, overrides, name, runs_dir)
    if data is not None:  # before planning: a run folder's saved recipe names the object, so reuse still works
        from longbert.data.sources import recipe_for_data_object

        recipes = {strategy: recipe_for_data_object(r, data) for strategy, r in recipes.items()}
    plan = plan_runs(recipes)
    preflight(recipes, plan)
    if command is None:
        command = _equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir)
        if data is not None:
            command += "  # with documents in memory (data=...)"

    # Train what is not finished yet, one strategy after another.
    runs: dict[str, dict] = {}
    for number, strategy in enumerate(names, 1):
        runs[strategy] = _run_one(strategy, recipes[strategy], plan[strategy], command, f"[{number}/{len(names)}]",
                                  data)
        _release_memory()

    # Measure and analyse with the kept models, then assemble every number the report shows.
    predictions = {s: read_predictions(Path(recipes[s].output_dir)) for s in names}
    chosen = select_examples(predictions, long_tokens, examples)
    label_names = runs[names[0]]["metrics"]["label_names"]
    corpus = None  # every run shares the data and the backbone's tokenizer: the splits are tokenized once, if at all

    def splits():
        nonlocal corpus
        if corpus is None:
            corpus = _load_corpus(recipes[names[0]], data)
        return corpus

    baseline = _tfidf_baseline(recipes[names[0]], runs_dir / name, splits)
    predictions_with_baseline = {**predictions, BASELINE: prediction_rows(baseline, [r["n_tokens"] for r in
                                                                                     predictions[names[0]]])}
    test = tokenizer = None
    speed: dict[str, dict] = {}
    decisive: dict[str, dict] = {}
    for strategy in names:
        run_dir, batch_size = Path(recipes[strategy].output_dir), recipes[strategy].eval.batch_size
        speed[strategy] = cached_speed(run_dir, speed_documents, batch_size)
        if speed[strategy] is not None and not chosen:
            continue
        model = _load_model(run_dir)
        if test is None:
            tokenizer, test = model.tokenizer, splits().splits["test"]
        if speed[strategy] is None:
            _say(f"timing {strategy} by document length")
            speed[strategy] = measure_speed_by_length(model, test, batch_size, speed_documents)
            save_speed(run_dir, speed[strategy], speed_documents, batch_size)
        decisive[strategy] = decisive_units(model, test, predictions[strategy], [c["index"] for c in chosen])
        del model
        _release_memory()
    error_examples = build_examples(chosen, predictions, decisive, test, tokenizer, label_names) if chosen else []

    results = assemble_results(
        name=name, names=names, recipes=recipes, runs=runs, predictions=predictions_with_baseline, speed=speed,
        examples=error_examples, command=command, base_source=base_source, overrides=overrides,
        machine=describe_machine(), long_tokens=long_tokens, label_names=label_names, baseline=baseline,
    )
    folder = reports_dir / name
    results["report"] = {"folder": str(folder), "markdown": str(folder / "report.md"),
                         "html": str(folder / "report.html"), "results": str(folder / "results.json")}
    report_module.write_report(results, folder)
    _say(f"report written to {folder}/")
    return results


def parse_strategies(value: Sequence[str] | str) -> list[str]:
    """'truncate,chunk' or ['truncate', 'chunk'] -> checked, de-duplicated names (order kept)."""
    from longbert.strategies.base import get_entry, strategy_names

    items = value.split(",") if isinstance(value, str) else [part for v in value for part in str(v).split(",")]
    names = list(dict.fromkeys(s.strip() for s in items if s.strip()))
    if not names:
        raise LongbertError(f"--strategies needs at least one name; valid strategies: {', '.join(strategy_names())}")
    unknown = [s for s in names if s not in strategy_names()]
    if len(unknown) == 1:
        get_entry(unknown[0])  # raises, listing the valid names
    if unknown:
        raise LongbertError(f"unknown strategies {', '.join(repr(s) for s in unknown)}; "
                            f"valid strategies: {', '.join(strategy_names())}")
    return names


# ------------------------------------------------------------------------------------------------------------
# Recipes: one per strategy, differing only in the strategy section (and the run's name and folder)


def default_recipe() -> Path:
    """The base recipe used when none is given: compare_imdb.yaml, packaged with longbert (longbert/recipes/, which
    a checkout also shows as recipes/)."""
    packaged = resources.files("longbert").joinpath("recipes", DEFAULT_RECIPE)
    if not packaged.is_file():
        raise LongbertError(f"the default base recipe {DEFAULT_RECIPE} is missing from this longbert installation; "
                            "pass --recipe")
    return Path(str(packaged))


def _base_recipe(recipe) -> tuple[dict, str, Path | None]:
    """(raw recipe mapping, a name for error messages and the report, the YAML path or None)."""
    from longbert.config import Recipe, read_recipe_file

    if isinstance(recipe, Recipe):
        return recipe.to_dict(), "the base recipe", None
    if recipe is None:  # named as a checkout shows it, wherever longbert is installed
        return read_recipe_file(default_recipe()), f"recipes/{DEFAULT_RECIPE}", None
    path = Path(recipe)
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())  # what the report shows: recipes/x.yaml, not a home folder
    return read_recipe_file(path), str(path), path


def _strategy_fields(strategy: str) -> set[str]:
    from longbert.strategies.base import get_entry

    return {f.name for f in dataclasses.fields(get_entry(strategy).config_cls)} - {"name"}


def split_overrides(overrides: list[str], names: list[str]) -> dict[str, list[str]]:
    """Each strategy's own list of `key.path=value` overrides, in the order given (see the module docstring).
    Every override is read by `config.parse_override`, the parser `longbert train --set` uses, so a malformed one
    fails here, once, before any strategy is resolved."""
    from longbert.config import Recipe, parse_override
    from longbert.strategies.base import strategy_names

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
            having = [s for s in names if keys[1] in _strategy_fields(s)]
            if not having:
                known = sorted(set().union(*(_strategy_fields(s) for s in names)))
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
                    runs_dir: Path) -> dict:
    """strategy -> its validated Recipe. Every problem of every strategy is raised together, before training."""
    from longbert.config import apply_overrides, recipe_from_dict

    per = split_overrides(overrides, names)
    recipes, problems = {}, {}
    for strategy in names:
        raw = copy.deepcopy(base_raw)
        section = raw.get("strategy")
        base_strategy = section.get("name") if isinstance(section, dict) else section
        if base_strategy != strategy:
            raw["strategy"] = {"name": strategy}
        try:
            raw = apply_overrides(raw, per[strategy])
            raw["name"] = f"{name}-{strategy}"
            raw["output_dir"] = str(runs_dir / name / strategy)
            recipes[strategy] = recipe_from_dict(raw, base_source)
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
    from longbert.training.frozen import refuse_untrainable
    from longbert.modeling.classifier import LongDocumentClassifier

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
    _release_memory()
    _raise_problems(problems, list(recipes))


def plan_runs(recipes: dict) -> dict[str, str]:
    """strategy -> 'reuse', 'resume' or 'train', from what its run folder holds. A folder holding a run with a
    different recipe is an error (raised for every such folder at once, before anything trains)."""
    from longbert.config import recipe_to_yaml

    plan, problems = {}, []
    for strategy, recipe in recipes.items():
        run_dir = Path(recipe.output_dir)
        saved = run_dir / "recipe.yaml"
        if not run_dir.exists() or not any(run_dir.iterdir()):
            plan[strategy] = "train"
        elif not saved.is_file():
            problems.append(f"{run_dir} is not empty and holds no recipe.yaml; move it away or choose another --name")
        elif saved.read_text() != recipe_to_yaml(recipe):
            differing = _differences(saved, recipe)
            problems.append(f"{run_dir} holds a run with a different recipe ({differing}); choose another --name, "
                            "or delete that folder to train it again")
        elif (run_dir / "metrics.json").is_file():
            plan[strategy] = "reuse"
        elif (run_dir / "checkpoint" / "state.json").is_file():
            plan[strategy] = "resume"
        else:
            plan[strategy] = "restart"
    if problems:
        raise LongbertError(" | ".join(problems))
    return plan


def _differences(saved: Path, recipe) -> str:
    import yaml

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    old, new = flat(yaml.safe_load(saved.read_text()) or {}), flat(recipe.to_dict())
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "") if keys else "formatting differs"


def _equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir) -> str:
    """The `longbert compare` command that repeats a library call."""
    parts = ["longbert", "compare", "--strategies", ",".join(names)]
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


# ------------------------------------------------------------------------------------------------------------
# Training each run, and loading what it left for the measurements and the error analysis


def _run_one(strategy: str, recipe, action: str, command: str, counter: str, data=None) -> dict:
    from longbert.training.finetune import TrainingInterrupted, train

    run_dir = Path(recipe.output_dir)
    if action == "reuse":
        _say(f"{counter} {strategy}: finished run in {run_dir} has the same recipe; reused")
        return {"status": "reused", "metrics": json.loads((run_dir / "metrics.json").read_text())}
    if action == "restart":
        _say(f"{counter} {strategy}: {run_dir} stopped before its first checkpoint; training it again")
    verb = "continuing from the checkpoint in" if action == "resume" else "training into"
    _say(f"{counter} {strategy}: {verb} {run_dir}")
    try:
        # resume=True for a folder that holds a run: train() first recovers what a killed write left (under the
        # run folder's lock), then continues from the checkpoint or, with none, starts that run again.
        result = train(recipe, resume=action != "train", command=command, data=data)
    except TrainingInterrupted as error:
        raise TrainingInterrupted(f"compare stopped while training {strategy} ({error}); run the same compare "
                                  "command again to continue where it stopped") from None
    return {"status": "resumed" if action == "resume" else "trained", "metrics": result.metrics}


def _release_memory() -> None:
    """Let one strategy's model and optimiser go before the next is built (peak memory is measured per run)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _load_model(run_dir: Path):
    import torch

    from longbert.modeling.classifier import LongDocumentClassifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return LongDocumentClassifier.from_pretrained(run_dir).to(device).eval()


def _load_corpus(recipe, data=None):
    """The splits exactly as training saw them (same data settings and seed), tokenized with the tokenizer the runs
    were trained with (the recipe's backbone's), from `data`, the object in memory, when the runs were trained on one."""
    from longbert.modeling.backbone import load_tokenizer
    from longbert.data.documents import load_corpus

    return load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed,
                       recipe.model.problem_type == "multi_label", source=data)


BASELINE_FILE = "tfidf-baseline.json"


def _tfidf_baseline(recipe, folder: Path, splits) -> dict:
    """The TF-IDF baseline on the recipe's data (see longbert.comparison.baseline), kept in <folder>/tfidf-baseline.json and
    reused while the data settings, seed and baseline settings are the same. `splits()` gives the Corpus."""
    import numpy as np

    from longbert.comparison.baseline import SETTINGS, tfidf_baseline
    from longbert.evaluation.command import write_json

    key = {"data": dataclasses.asdict(recipe.data), "seed": recipe.seed, "backbone": recipe.backbone.name,
           "problem_type": recipe.model.problem_type, "settings": SETTINGS}
    path = folder / BASELINE_FILE
    try:
        saved = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        saved = None
    if saved is not None and saved.get("key") == json.loads(json.dumps(key)):
        result = saved["result"]
        return {**result, "probabilities": np.asarray(result["probabilities"]), "labels": np.asarray(result["labels"])}
    _say("training the TF-IDF + logistic regression baseline")
    result = tfidf_baseline(splits())
    _say(f"baseline: test {100 * result['metrics'].get('accuracy', result['metrics'].get('exact_match', 0)):.1f}% "
         f"(C={result['settings']['C']} chosen on validation) in {result['train_seconds']:.0f}s")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, {"key": key, "result": {**result, "probabilities": result["probabilities"].tolist(),
                                             "labels": result["labels"].tolist()}})
    return result
