"""Compare strategies: train each named strategy on the same data, backbone, seed and budget, measure what each
one costs, and write one report that says which to use (reports/<name>/report.md, report.html, results.json).

    import longbert
    results = longbert.compare(["truncate", "chunk"], "recipes/compare/imdb.yaml", ["train.epochs=2"])
    results["strategies"]["chunk"]["accuracy"]

Each strategy's recipe is resolved as
    the base recipe (`recipe`; else, packaged with longbert, recipes/compare/own_data.yaml when an override sets
                     data.path, recipes/compare/imdb.yaml when none does)
    + strategy.name=<s>   (the base's strategy settings are kept when its strategy is <s>; others start from
                           their defaults)
    + the base recipe's section named <s>, if it has one (`bigbird: {unit_tokens: 126}`: <s>'s own fields)
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
With --seeds N each strategy is also trained at seeds s0 + 1 ... s0 + N - 1 (s0: the recipe's seed), on the same
documents, into <runs_dir>/<name>/<strategy>-seed<k>/; the report adds a row per strategy for its seeds' averaged
probabilities, and the spread (mean ± sd) of its single runs.
The run folder of the strategy best on validation also gets hybrid/: that run's model mixed with TF-IDF
(`longbert hybrid`), remade by every compare (seconds: no neural pass is repeated). When the ensemble row scores
higher on validation than every strategy, the ensemble is mixed with TF-IDF instead: <runs_dir>/<name>/ensemble/
(the ensemble as a folder) and <runs_dir>/<name>/hybrid/.

This module runs a comparison from start to end; the rest of it lives beside it:
    plan         the base recipe and the report's name; one recipe per strategy from the base and the
                 overrides; reuse, resume or train; early checks
    strategy_runs  training (or reusing) one strategy's run, loading what it left; the TF-IDF baseline row
    speed        speed and memory by document length (measured, cached in the run folder)
    statistics   Wilson intervals and the exact McNemar test (scipy)
    results      prediction rows and the results dict (results.json): every number the report shows
    verdict      what the results decide (best, significant, cheapest) and the sentences that say it
    page, render, plots   the report's blocks, its Markdown and HTML, its figures; and the terminal summary
and longbert.inference.attribution finds, for the error analysis, which part of each long document decided.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from pathlib import Path
from typing import Iterable, Sequence

from longbert.comparison.plan import (
    base_recipe,
    describe_base,
    plan_runs,
    preflight,
    report_name,
    resolve_recipes,
    seed_recipes,
)
from longbert.comparison.strategy_runs import baseline_row, load_model, load_splits, run_strategy, say
from longbert.config import is_multi_label
from longbert.errors import LongbertError
from longbert.evaluation.metrics import LONG_TOKENS
from longbert.utils.atomic import replaceable_folder
from longbert.utils.destinations import folder_to_write
from longbert.utils.folders import RESULTS_FILE
from longbert.utils.hardware import release_memory

DEFAULT_RUNS_DIR = Path("runs") / "compare"
DEFAULT_REPORTS_DIR = Path("reports")


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
    seeds: int = 1,
) -> dict:
    """Train (or reuse) one run per strategy and write the comparison report.

    strategies: names from the registry (a list, or one comma-separated string); all are checked before any
        training, unknown ones raise LongbertError listing the valid names.
    recipe: the base recipe: a YAML path, a Recipe, or None for one packaged with longbert: compare/own_data.yaml
        (every document) when an override sets data.path or `data` is given, else compare/imdb.yaml (an IMDb subset).
    overrides: `key.path=value` strings (see the module docstring for the per-strategy forms).
    name: the report's name (reports/<name>/, <runs_dir>/<name>/); default: compare_<stem> on the user's own file or
        folder (data.path set by an override, no base recipe given), else the base recipe's name.
    speed_documents: at most this many test documents per length bucket are timed for the speed plot.
    examples: at most this many long documents in the error analysis; long_tokens: what counts as long.
    data: documents in memory for every run instead of data.path (see `longbert.train`'s `data`).
    seeds: runs per strategy, at seeds s0 ... s0 + seeds - 1 on the same documents (s0: the recipe's seed, whose runs
        are the strategies' rows); with more than one, each strategy also gets a row of its seeds' averaged
        probabilities, with the single runs' mean ± sd.
    Returns the results dict that results.json holds (every number in the report), with `report` giving the
    written files."""
    names, overrides = parse_strategies(strategies), list(overrides)
    base_raw, base_source, base_path = base_recipe(recipe, overrides, data)
    name = report_name(name, recipe, overrides, data)
    runs_dir, reports_dir = Path(runs_dir), Path(reports_dir)
    recipes, by_seed, base_seed = _resolve_runs(names, base_raw, base_source, overrides, name, runs_dir, seeds, data)
    c = _Comparison(name=name, names=names, overrides=overrides, base_source=base_source, runs_dir=runs_dir,
                    reports_dir=reports_dir, recipes=recipes, by_seed=by_seed, base_seed=base_seed, data=data,
                    seeds=seeds, long_tokens=long_tokens, examples=examples, speed_documents=speed_documents)
    _check_before_training(c)
    say(describe_base(base_source, c.first, recipe is None))  # once every check passed: a refusal stays one line
    c.command = command if command is not None else _command_of_call(c, recipe, base_path)
    runs = _train_runs(c)
    # Measure and analyse with the kept models, then assemble every number the report shows.
    results, combined = _measure_and_assemble(c, runs)
    # The model to deploy, chosen on validation among the rows a folder can hold; an ensemble is written as a folder.
    results["deployable"] = _deployable(c, combined)
    _write_report(results, reports_dir / name)
    return results


@dataclasses.dataclass
class _Comparison:
    """What every step of one compare shares: the strategies, their resolved recipes, where runs and the report go,
    and the call's options."""

    name: str
    names: list[str]  # strategies in report order
    overrides: list[str]
    base_source: str
    runs_dir: Path
    reports_dir: Path
    recipes: dict  # strategy -> its Recipe at the base seed (whose runs are the strategies' rows)
    by_seed: dict  # strategy -> seed -> Recipe
    base_seed: int
    data: object
    seeds: int
    long_tokens: int
    examples: int
    speed_documents: int
    command: str | None = None  # set once the early checks passed

    @property
    def first(self):
        """The first strategy's recipe: the data, backbone, seed and budget every run shares."""
        return self.recipes[self.names[0]]

    @property
    def seed_list(self) -> list[int]:
        return sorted(self.by_seed[self.names[0]])

    @property
    def multi_label(self) -> bool:
        return is_multi_label(self.first.model.problem_type)


def _resolve_runs(names, base_raw, base_source, overrides, name, runs_dir, seeds, data) -> tuple[dict, dict, int]:
    """(each strategy's recipe at the base seed, strategy -> seed -> recipe, the base seed)."""
    recipes = resolve_recipes(names, base_raw, base_source, overrides, name, runs_dir)
    by_seed = seed_recipes(recipes, seeds, base_raw, base_source, overrides, name, runs_dir)
    if data is not None:  # before planning: a run folder's saved recipe names the object, so reuse still works
        from longbert.data.objects import recipe_for_data_object

        by_seed = {s: {k: recipe_for_data_object(r, data) for k, r in rs.items()} for s, rs in by_seed.items()}
    base_seed = recipes[names[0]].seed
    return {s: by_seed[s][base_seed] for s in names}, by_seed, base_seed


def _check_before_training(c: _Comparison) -> None:
    """Every check that can refuse the comparison, before any training."""

    labelled = {_run_label(s, k, c.base_seed): r for s in c.names for k, r in c.by_seed[s].items()}
    plan = plan_runs(labelled)  # every folder's conflicts, before training
    # A seed changes no shape: each strategy's model is built once, when any of its runs is about to train.
    preflight(c.recipes, {s: "reuse" if all(plan[_run_label(s, k, c.base_seed)] == "reuse" for k in c.by_seed[s])
                          else "train" for s in c.names})
    # Both folders are written after the training: a place that cannot be written fails now, not an hour later,
    # and before either is made, so that a refusal leaves nothing behind.
    folder_to_write(c.runs_dir, "--runs-dir")
    folder_to_write(c.reports_dir, "--reports-dir")
    replaceable_folder(c.reports_dir / c.name, RESULTS_FILE, "report folder")  # an earlier report, or nothing


def _command_of_call(c: _Comparison, recipe, base_path: Path | None) -> str:
    """The `longbert compare` command that repeats this call, saying so when the documents were in memory."""
    command = _equivalent_command(c.names, base_path, recipe, c.overrides, c.name, c.runs_dir, c.reports_dir,
                                  c.seeds)
    if c.data is not None:
        command += "  # with documents in memory (data=...)"
    return command


def _train_runs(c: _Comparison) -> dict[str, dict]:
    """Train what is not finished yet, one strategy after another, every strategy at one seed before the next seed.
    Returns each strategy's run ({status, metrics}) at the base seed."""
    runs: dict[str, dict] = {}
    order = [(s, k) for k in c.seed_list for s in c.names]
    for number, (strategy, seed) in enumerate(order, 1):
        run = run_strategy(_run_label(strategy, seed, c.base_seed), c.by_seed[strategy][seed], c.command,
                           f"[{number}/{len(order)}]", c.data)
        if seed == c.base_seed:
            runs[strategy] = run
        release_memory()
    return runs


def _measure_and_assemble(c: _Comparison, runs: dict[str, dict]) -> tuple[dict, list[dict]]:
    """(the results dict, the combined rows): the test predictions, the combined and baseline rows, speed by length
    and the error-analysis examples, assembled into every number the report shows."""
    from longbert.comparison.baseline import BASELINE, prediction_rows
    from longbert.comparison.results import assemble_results, read_predictions
    from longbert.inference.attribution import select_examples
    from longbert.utils.hardware import describe_machine

    predictions = {s: read_predictions(Path(c.recipes[s].output_dir)) for s in c.names}
    chosen = select_examples(predictions, c.long_tokens, c.examples)
    label_names = runs[c.names[0]]["metrics"].label_names
    # Every run shares the data and the backbone's tokenizer: the splits are tokenized once, if at all.
    splits = functools.cache(lambda: load_splits(c.first, c.data))
    combined, combined_notes, combined_test = _combined_rows(c, predictions, label_names, splits)
    baseline = baseline_row(c.first, c.runs_dir / c.name, splits)
    predictions_with_baseline = {**predictions, **combined_test,
                                 BASELINE: prediction_rows(baseline, [r.n_tokens for r in predictions[c.names[0]]])}
    speed, error_examples = _speed_and_examples(c, predictions, chosen, label_names, splits)
    results = assemble_results(
        name=c.name, names=c.names, recipes=c.recipes, runs=runs, predictions=predictions_with_baseline, speed=speed,
        examples=error_examples, command=c.command, base_source=c.base_source, overrides=c.overrides,
        machine=describe_machine(), long_tokens=c.long_tokens, label_names=label_names, baseline=baseline,
        combined=combined, combined_notes=combined_notes, seeds=c.seed_list,
    )
    return results, combined


def _combined_rows(c: _Comparison, predictions, label_names, splits) -> tuple[list[dict], list[str], dict]:
    """(the combined rows' summaries, why any is missing, their test rows by name)."""
    from longbert.comparison.ensemble import build_ensemble, build_hybrid, build_seed_ensembles
    from longbert.comparison.results import read_predictions

    # The rows that combine trained runs, each chosen on validation, no training: the ensemble (test probabilities
    # averaged) and the hybrid (the best run, or the ensemble when it is better still on validation, mixed with
    # TF-IDF over its token ids). With --seeds N every seed's run is a candidate for both; an ensemble mixes two
    # strategies or more (one strategy's seeds averaged are its seed row).
    first = c.first
    seed_test = {s: {k: predictions[s] if k == c.base_seed else read_predictions(Path(r.output_dir))
                     for k, r in c.by_seed[s].items()} for s in c.names}
    run_dirs = {_run_label(s, k, c.base_seed): Path(c.by_seed[s][k].output_dir) for k in c.seed_list for s in c.names}
    run_test = {_run_label(s, k, c.base_seed): seed_test[s][k] for k in c.seed_list for s in c.names}
    strategy_of = {_run_label(s, k, c.base_seed): s for k in c.seed_list for s in c.names}
    combined, combined_notes, combined_test = [], [], {}
    ensemble = build_ensemble(run_dirs, run_test, first.train.best_metric, c.multi_label, label_names, strategy_of)
    hybrid = build_hybrid(run_dirs, first.train.best_metric, c.multi_label, splits, ensemble[0], c.runs_dir / c.name)
    for summary, rows, note in (ensemble, hybrid):
        combined_notes.append(note)
        if summary is not None:
            combined.append(summary)
            combined_test[summary["name"]] = rows
    if c.seeds > 1:  # each strategy's seeds averaged: a row per strategy
        summaries, rows, note = build_seed_ensembles(seed_test, c.multi_label, label_names, c.long_tokens)
        combined += summaries
        combined_test.update(rows)
        combined_notes.append(note)
    return combined, combined_notes, combined_test


def _speed_and_examples(c: _Comparison, predictions, chosen, label_names, splits) -> tuple[dict, list[dict]]:
    """Each strategy's speed by length (cached in its run folder, else measured now) and the error-analysis
    examples; a strategy's model is loaded only when it must be timed or explain a chosen document."""
    from longbert.comparison.speed import cached_speed, measure_speed_by_length, save_speed
    from longbert.inference.attribution import build_examples, decisive_units

    test = tokenizer = None
    speed: dict[str, dict] = {}
    decisive: dict[str, dict] = {}
    for strategy in c.names:
        run_dir, batch_size = Path(c.recipes[strategy].output_dir), c.recipes[strategy].eval.batch_size
        speed[strategy] = cached_speed(run_dir, c.speed_documents, batch_size)
        if speed[strategy] is not None and not chosen:
            continue
        model = load_model(run_dir)
        if test is None:
            tokenizer, test = model.tokenizer, splits().splits["test"]
        if speed[strategy] is None:
            say(f"timing {strategy} by document length")
            speed[strategy] = measure_speed_by_length(model, test, batch_size, c.speed_documents)
            save_speed(run_dir, speed[strategy], c.speed_documents, batch_size)
        decisive[strategy] = decisive_units(model, test, predictions[strategy], [e["index"] for e in chosen])
        del model
        release_memory()
    return speed, build_examples(chosen, predictions, decisive, test, tokenizer, label_names) if chosen else []


def _deployable(c: _Comparison, combined: list[dict]) -> dict | None:
    """The model to deploy (`ensemble_folder.deployable`); None for multi-label runs."""
    from longbert.comparison.ensemble import selection_metric
    from longbert.comparison.ensemble_folder import deployable

    if c.multi_label:
        return None
    return deployable({s: {_run_label(s, k, c.base_seed): Path(c.by_seed[s][k].output_dir) for k in c.seed_list}
                       for s in c.names}, combined, c.runs_dir / c.name, selection_metric(c.first.train.best_metric))


def _write_report(results: dict, folder: Path) -> None:
    """Name the report's files in `results` and write them to `folder`."""
    from longbert.comparison.render import report_files, write_report

    results["report"] = report_files(folder)
    write_report(results, folder)
    say(f"report written to {folder}/")


def _run_label(strategy: str, seed: int, base_seed: int) -> str:
    """How a run is named in compare's messages and plan: the strategy at the base seed, 'chunk-seed43' at others
    (as its folder)."""
    return strategy if seed == base_seed else f"{strategy}-seed{seed}"


def parse_strategies(value: Sequence[str] | str) -> list[str]:
    """'truncate,chunk' or ['truncate', 'chunk'] -> checked, de-duplicated names (order kept)."""
    from longbert.strategies.registry import get_entry, strategy_names

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
# The command line that repeats a call


def _equivalent_command(names, base_path, recipe, overrides, name, runs_dir, reports_dir, seeds=1) -> str:
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
