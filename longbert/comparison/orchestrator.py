"""Compare strategies: train each named strategy on the same data, backbone, seed and budget, measure what each
one costs, and write one report that says which to use (reports/<name>/report.md, report.html, results.json).

    import longbert
    result = longbert.compare(["truncate", "chunk"], "recipes/compare/imdb.yaml", ["train.epochs=2"])
    result.metrics["strategies"]["chunk"]["accuracy"]
    result.model    # the model to deploy, chosen on validation: a run's folder, an ensemble's or a hybrid's

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

This module runs a comparison from start to end (`Comparison`); the rest of it lives beside it:
    plan               the base recipe and the report's name; one recipe per strategy from the base and the
                       overrides; reuse, resume or train; early checks
    strategy_training  training (or reusing) one strategy's run at its turn
    baseline           the TF-IDF baseline row, kept beside the runs
    combined           the rows that combine trained runs (ensemble, hybrid, seeds) and the model to deploy
    speed              speed and memory by document length (measured, cached in the run folder)
    statistics         Wilson intervals and the exact McNemar test (scipy)
    report_numbers     prediction rows and the results dict (results.json): every number the report shows
    verdict            what the results decide (best, significant, cheapest) and the sentences that say it
    page, render, figures   the report's blocks, its Markdown and HTML, its figures; and the terminal summary
and longbert.inference.attribution finds, for the error analysis, which part of each long document decided.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterable, Sequence

import torch

from longbert.comparison.baseline import BASELINE, baseline_row, prediction_rows
from longbert.comparison.combined import build_ensemble, build_hybrid, build_seed_ensembles, deployable
from longbert.comparison.formatting import say
from longbert.comparison.plan import (
    DEFAULT_REPORTS_DIR,
    DEFAULT_RUNS_DIR,
    base_recipe,
    describe_base,
    equivalent_command,
    parse_strategies,
    plan_runs,
    preflight,
    report_name,
    resolve_recipes,
    seed_recipes,
)
from longbert.comparison.render import report_files, write_report
from longbert.comparison.report_numbers import assemble_results, read_predictions
from longbert.comparison.speed import cached_speed, measure_speed_by_length, save_speed
from longbert.comparison.strategy_training import StrategyRun, run_strategy
from longbert.config import is_multi_label
from longbert.data.documents import load_corpus
from longbert.data.lengths import LONG_TOKENS
from longbert.data.objects import IN_MEMORY, recipe_for_data_object
from longbert.data.sources import resolve_data_path
from longbert.ensembles.choice import average_calibration, averaged_rows, read_validation, selection_metric
from longbert.inference.attribution import build_examples, decisive_units, select_examples
from longbert.modeling.backbone import load_tokenizer
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.result import Result
from longbert.utils.destinations import folder_to_write
from longbert.utils.folders import HYBRID, RESULTS_FILE
from longbert.utils.hardware import describe_machine, release_memory
from longbert.utils.outputs import replaceable_folder

SPEED_DOCUMENTS = 48  # at most this many test documents per length bucket timed for the speed plot
EXAMPLES = 6  # at most this many long documents in the error analysis


def compare(
    strategies: Sequence[str] | str,
    recipe=None,
    overrides: Iterable[str] = (),
    name: str | None = None,
    *,
    runs_dir: str | Path = DEFAULT_RUNS_DIR,
    reports_dir: str | Path = DEFAULT_REPORTS_DIR,
    command: str | None = None,
    speed_documents: int = SPEED_DOCUMENTS,
    examples: int = EXAMPLES,
    long_tokens: int = LONG_TOKENS,
    data=None,
    seeds: int = 1,
) -> Result:
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
    Returns a `Result`: the report folder; as its metrics, the results dict that results.json holds (every number in
    the report, `report` giving the written files); as its model, the folder of the model to deploy (None for
    multi-label runs, or where a run kept no validation predictions)."""
    comparison = Comparison(strategies, recipe, overrides, name, runs_dir=runs_dir, reports_dir=reports_dir,
                            command=command, speed_documents=speed_documents, examples=examples,
                            long_tokens=long_tokens, data=data, seeds=seeds)
    comparison.setup()
    return comparison.run()


class Comparison:
    """One compare, read top to bottom: `__init__` keeps the call's settings; `setup()` resolves every run's recipe
    and refuses, before any training, what cannot be done; `run()` trains what is not finished, measures, chooses the
    model to deploy and writes the report."""

    def __init__(self, strategies: Sequence[str] | str, recipe, overrides: Iterable[str], name: str | None, *,
                 runs_dir: str | Path, reports_dir: str | Path, command: str | None, speed_documents: int,
                 examples: int, long_tokens: int, data, seeds: int):
        self.strategies, self.recipe, self.overrides, self.name = strategies, recipe, list(overrides), name
        self.runs_dir, self.reports_dir = Path(runs_dir), Path(reports_dir)
        self.command = command  # None: the command that repeats this call, made once the early checks passed
        self.speed_documents, self.examples, self.long_tokens = speed_documents, examples, long_tokens
        self.data, self.seeds = data, seeds

    def setup(self) -> None:
        """Every strategy's recipe at every seed, resolved from the base recipe and the overrides; then every check
        that can refuse the comparison, before any training."""
        self.names = parse_strategies(self.strategies)  # strategies in report order
        self.base_raw, self.base_source, self.base_path = base_recipe(self.recipe, self.overrides, self.data)
        self.name = report_name(self.name, self.recipe, self.overrides, self.data)
        self._resolve_runs()
        self._check_before_training()
        say(describe_base(self.base_source, self.first, self.recipe is None))  # a refusal above stays one line
        if self.command is None:
            self.command = self._command_of_call()

    def run(self) -> Result:
        """Train, measure, choose and write; returns the report's `Result`."""
        runs = self._train_runs()
        # Measure and analyse with the kept models, then assemble every number the report shows.
        results, combined = self._measure_and_assemble(runs)
        # The model to deploy, chosen on validation among the rows a folder can hold; an ensemble is written as a
        # folder.
        results["deployable"] = self._deployable(combined)
        self._write_report(results)
        chosen = results["deployable"]
        return Result(folder=self.folder, metrics=results, model=Path(chosen["folder"]) if chosen else None)

    # --------------------------------------------------------------------------------------------------------
    # What every step shares

    @property
    def folder(self) -> Path:
        """The report folder."""
        return self.reports_dir / self.name

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

    def run_label(self, strategy: str, seed: int) -> str:
        """How a run is named in compare's messages and plan: the strategy at the base seed, 'chunk-seed43' at others
        (as its folder)."""
        return strategy if seed == self.base_seed else f"{strategy}-seed{seed}"

    @functools.cached_property
    def corpus(self):
        """The splits exactly as training saw them (same data settings and seed), tokenized with the tokenizer the
        runs were trained with (every run shares the data and the backbone's tokenizer), once and only if needed."""
        return load_splits(self.first, self.data)

    # --------------------------------------------------------------------------------------------------------
    # Setup

    def _resolve_runs(self) -> None:
        """Each strategy's recipe at the base seed (`recipes`), strategy -> seed -> recipe (`by_seed`), and the base
        seed, whose runs are the strategies' rows."""
        args = (self.base_raw, self.base_source, self.overrides, self.name, self.runs_dir)
        recipes = resolve_recipes(self.names, *args)
        by_seed = seed_recipes(recipes, self.seeds, *args)
        if self.data is not None:  # before planning: a run folder's saved recipe names the object, so reuse still works
            by_seed = {s: {k: recipe_for_data_object(r, self.data) for k, r in rs.items()} for s, rs in by_seed.items()}
        self.base_seed = recipes[self.names[0]].seed
        self.by_seed = by_seed
        self.recipes = {s: by_seed[s][self.base_seed] for s in self.names}

    def _check_before_training(self) -> None:
        """Every check that can refuse the comparison, before any training."""
        if self.data is None and not self.first.data.path.startswith(IN_MEMORY):
            resolve_data_path(self.first.data.path)  # a path that is missing, or a pipe, is refused before any line
        labelled = {self.run_label(s, k): r for s in self.names for k, r in self.by_seed[s].items()}
        plan = plan_runs(labelled)  # every folder's conflicts, before training
        # A seed changes no shape: each strategy's model is built once, when any of its runs is about to train.
        preflight(self.recipes, {s: "reuse" if all(plan[self.run_label(s, k)] == "reuse" for k in self.by_seed[s])
                                 else "train" for s in self.names})
        # Both folders are written after the training: a place that cannot be written fails now, not an hour later,
        # and before either is made, so that a refusal leaves nothing behind.
        folder_to_write(self.runs_dir, "--runs-dir")
        folder_to_write(self.reports_dir, "--reports-dir")
        replaceable_folder(self.folder, RESULTS_FILE, "report folder")  # an earlier report, or nothing

    def _command_of_call(self) -> str:
        """The `longbert compare` command that repeats this call, saying so when the documents were in memory."""
        command = equivalent_command(self.names, self.base_path, self.recipe, self.overrides, self.name,
                                     self.runs_dir, self.reports_dir, self.seeds)
        if self.data is not None:
            command += "  # with documents in memory (data=...)"
        return command

    # --------------------------------------------------------------------------------------------------------
    # Run

    def _train_runs(self) -> dict[str, StrategyRun]:
        """Train what is not finished yet, one strategy after another, every strategy at one seed before the next
        seed. Returns each strategy's run ({status, metrics}) at the base seed."""
        runs: dict[str, StrategyRun] = {}
        order = [(s, k) for k in self.seed_list for s in self.names]
        for number, (strategy, seed) in enumerate(order, 1):
            run = run_strategy(self.run_label(strategy, seed), self.by_seed[strategy][seed], self.command,
                               f"[{number}/{len(order)}]", self.data)
            if seed == self.base_seed:
                runs[strategy] = run
            release_memory()
        return runs

    def _measure_and_assemble(self, runs: dict[str, StrategyRun]) -> tuple[dict, list[dict]]:
        """(the results dict, the combined rows): the test predictions, the combined and baseline rows, speed by
        length and the error-analysis examples, assembled into every number the report shows."""
        predictions = {s: read_predictions(Path(self.recipes[s].output_dir)) for s in self.names}
        chosen = select_examples(predictions, self.long_tokens, self.examples)
        label_names = runs[self.names[0]]["metrics"].label_names
        combined, combined_notes, combined_test = self._combined_rows(predictions, label_names)
        baseline = baseline_row(self.first, self.runs_dir / self.name, lambda: self.corpus)
        lengths = [r.n_tokens for r in predictions[self.names[0]]]
        predictions_with_baseline = {**predictions, **combined_test, BASELINE: prediction_rows(baseline, lengths)}
        speed, error_examples = self._speed_and_examples(predictions, chosen, label_names)
        results = assemble_results(
            name=self.name, names=self.names, recipes=self.recipes, runs=runs, predictions=predictions_with_baseline,
            speed=speed, examples=error_examples, command=self.command, base_source=self.base_source,
            overrides=self.overrides, machine=describe_machine(), long_tokens=self.long_tokens,
            label_names=label_names, baseline=baseline, combined=combined, combined_notes=combined_notes,
            seeds=self.seed_list, validation=self._validation_rows(combined, label_names),
            target_accuracy=self.first.eval.target_accuracy,
        )
        return results, combined

    def _validation_rows(self, combined: list[dict], label_names: list[str]) -> dict[str, list | None]:
        """Each row's validation predictions, on which its abstention threshold is chosen (None where a run kept
        none): a strategy's run's, the hybrid folder's, and the ensemble's and each seed row's members averaged and
        calibrated as their test rows are (`averaged_rows`). The baseline keeps none."""
        read = functools.cache(read_validation)
        runs = {self.run_label(s, k): Path(r.output_dir) for s in self.names for k, r in self.by_seed[s].items()}
        rows = {s: read(runs[s]) for s in self.names}
        for row in combined:
            if row["name"] == HYBRID:  # a model folder of its own, with its validation predictions
                rows[HYBRID] = read(Path(row["folder"]))
                continue
            members = (tuple(self.run_label(row["strategy"], k) for k in row["seeds"]) if "seeds" in row
                       else tuple(row["members"]))
            validation = {m: read(runs[m]) for m in members}
            rows[row["name"]] = None if any(v is None for v in validation.values()) else averaged_rows(
                validation, members, label_names, average_calibration(validation, members))
        return rows

    def _combined_rows(self, predictions, label_names) -> tuple[list[dict], list[str], dict]:
        """(the combined rows' summaries, why any is missing, their test rows by name)."""
        # The rows that combine trained runs, each chosen on validation, no training: the ensemble (test
        # probabilities averaged) and the hybrid (the best run, or the ensemble when it is better still on
        # validation, mixed with TF-IDF over its token ids). With --seeds N every seed's run is a candidate for both;
        # an ensemble mixes two strategies or more (one strategy's seeds averaged are its seed row).
        seed_test = {s: {k: predictions[s] if k == self.base_seed else read_predictions(Path(r.output_dir))
                         for k, r in self.by_seed[s].items()} for s in self.names}
        labels = [(self.run_label(s, k), s, k) for k in self.seed_list for s in self.names]
        run_dirs = {label: Path(self.by_seed[s][k].output_dir) for label, s, k in labels}
        run_test = {label: seed_test[s][k] for label, s, k in labels}
        strategy_of = {label: s for label, s, _ in labels}
        metric = self.first.train.best_metric
        ensemble = build_ensemble(run_dirs, run_test, metric, self.multi_label, label_names, strategy_of)
        hybrid = build_hybrid(run_dirs, metric, self.multi_label, lambda: self.corpus, ensemble[0],
                              self.runs_dir / self.name)
        combined, combined_notes, combined_test = [], [], {}
        for summary, rows, note in (ensemble, hybrid):
            combined_notes.append(note)
            if summary is not None:
                combined.append(summary)
                combined_test[summary["name"]] = rows
        if self.seeds > 1:  # each strategy's seeds averaged: a row per strategy
            seed_validation = {s: {k: read_validation(Path(r.output_dir)) for k, r in self.by_seed[s].items()}
                               for s in self.names}
            summaries, rows, note = build_seed_ensembles(seed_test, self.multi_label, label_names, self.long_tokens,
                                                         seed_validation)
            combined += summaries
            combined_test.update(rows)
            combined_notes.append(note)
        return combined, combined_notes, combined_test

    def _speed_and_examples(self, predictions, chosen, label_names) -> tuple[dict, list[dict]]:
        """Each strategy's speed by length (cached in its run folder, else measured now) and the error-analysis
        examples; a strategy's model is loaded only when it must be timed or explain a chosen document."""
        test = tokenizer = None
        speed: dict[str, dict] = {}
        decisive: dict[str, dict] = {}
        for strategy in self.names:
            run_dir, batch_size = Path(self.recipes[strategy].output_dir), self.recipes[strategy].eval.batch_size
            speed[strategy] = cached_speed(run_dir, self.speed_documents, batch_size)
            if speed[strategy] is not None and not chosen:
                continue
            model = load_model(run_dir)
            if test is None:
                tokenizer, test = model.tokenizer, self.corpus.splits["test"]
            if speed[strategy] is None:
                say(f"timing {strategy} by document length")
                speed[strategy] = measure_speed_by_length(model, test, batch_size, self.speed_documents)
                save_speed(run_dir, speed[strategy], self.speed_documents, batch_size)
            decisive[strategy] = decisive_units(model, test, predictions[strategy], [e["index"] for e in chosen])
            del model
            release_memory()
        return speed, build_examples(chosen, predictions, decisive, test, tokenizer, label_names) if chosen else []

    def _deployable(self, combined: list[dict]) -> dict | None:
        """The model to deploy (`combined.deployable`); None for multi-label runs."""
        if self.multi_label:
            return None
        runs = {s: {self.run_label(s, k): Path(self.by_seed[s][k].output_dir) for k in self.seed_list}
                for s in self.names}
        return deployable(runs, combined, self.runs_dir / self.name, selection_metric(self.first.train.best_metric))

    def _write_report(self, results: dict) -> None:
        """Name the report's files in `results` and write them to the report folder."""
        results["report"] = report_files(self.folder)
        write_report(results, self.folder)
        say(f"report written to {self.folder}/")


# ------------------------------------------------------------------------------------------------------------
# What the runs left, loaded again for the measurements


def load_model(run_dir: Path) -> LongDocumentClassifier:
    """The run's kept model, on the GPU when there is one, ready for inference."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return LongDocumentClassifier.from_pretrained(run_dir).to(device).eval()


def load_splits(recipe, data=None):
    """The splits exactly as training saw them (same data settings and seed), tokenized with the tokenizer the runs
    were trained with (the recipe's backbone's), from `data`, the object in memory, when the runs were trained on
    one."""
    return load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed,
                       is_multi_label(recipe.model.problem_type), source=data)
