"""What a fine-tuning run writes once its loop ends: the kept model restored and its validation predictions made
once (`restore_kept_model`), what metrics.json holds (`run_metrics`), and the test evaluation with the files it
leaves in the run folder: predictions, metrics.json, metrics.md, the training curves and the card's test results
(`test_and_write_results`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from longbert.config import Recipe, is_multi_label
from longbert.evaluation.evaluate import metrics_markdown, write_predictions
from longbert.evaluation.metrics import tune_thresholds
from longbert.evaluation.split_pass import evaluate_split
from longbert.modeling.calibration import Calibration, calibrated_raw, fit_calibration
from longbert.modeling.card import refresh_card
from longbert.training.checkpoint import LoopState, load_trainable_weights
from longbert.training.curves import write_training_curves
from longbert.training.run_record import RunMetrics, write_run_metrics
from longbert.utils.atomic import write_text_atomically
from longbert.utils.folders import BEST, CURVES_FILE, METRICS_PAGE, RUN_CONFUSION_FILE, predictions_file
from longbert.utils.hardware import describe_machine
from longbert.utils.logs import main_process_logger

log = main_process_logger(__name__)  # on the main process only


def restore_kept_model(recipe: Recipe, model, best, corpus, cached, accelerator) -> tuple:
    """The kept model: its weights back into the model in memory (token ids, in every mode: the test measures the
    whole model; no autocast wrapper from training is left on), and its validation predictions, made once: multi-label
    thresholds are tuned on them, its calibration is fitted on them, and compare chooses its ensembles on them (never
    on the test split). Returns the unwrapped model, those predictions as the calibrated model answers them (None
    without a validation split) and the calibration (None without one)."""
    core = kept_model(model, best, accelerator)
    core.settings.temperatures = None  # fitted below for these weights (a model given to train may hold one)
    validation_raw = None
    if "validation" in corpus.splits:
        _, validation_raw = evaluate_split(core, corpus.splits["validation"], recipe.eval.batch_size,
                                           description="validation", cached=cached["validation"] if cached else None,
                                           process=accelerator.state, memory=False)
    calibration = None
    if validation_raw is not None:
        # The kept model's calibration, fitted on its validation predictions (thresholds are then tuned on the
        # calibrated ones: those it answers); saved with it.
        validation_raw, calibration = calibrate_kept_model(core, validation_raw, recipe.model.calibration)
    threshold = recipe.model.multi_label_threshold
    if is_multi_label(recipe.model.problem_type) and isinstance(threshold, str):
        # The kept model's decision thresholds, tuned on its validation predictions; saved with it.
        core.settings.thresholds = tune_thresholds(validation_raw["labels"], validation_raw["probabilities"],
                                                   threshold == "tune_per_label")
        log.info("multi-label thresholds tuned on validation: " + ", ".join(
            f"{n} {t:.3f}" for n, t in zip(corpus.label_names, core.settings.thresholds)))
    return core, validation_raw, calibration


def kept_model(model, best, accelerator):
    """The unwrapped model (no autocast wrapper from training left on) with the kept weights (`best`, from
    `trainable_weights`; None: the current ones) loaded back, once every process has finished training."""
    accelerator.wait_for_everyone()
    core = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    if best is not None:
        load_trainable_weights(core, best, "the kept weights")
    return core


def calibrate_kept_model(core, validation_raw: dict, choice: str) -> tuple[dict, Calibration]:
    """Fit the kept model's calibration on its validation predictions (`fit_calibration`, `choice` as the recipe's
    model.calibration says), set it on the model, and return the validation predictions as the calibrated model
    answers them, with the calibration."""
    calibration = fit_calibration(validation_raw["probabilities"], validation_raw["labels"], core.multi_label,
                                  choice=choice)
    core.settings.temperatures = calibration.model_temperatures
    if calibration.method != "none":
        log.info("calibration fitted on validation: temperature " + ", ".join(
            f"{t:.3f}" for t in calibration.temperatures))
        if calibration.reason:
            log.warning(f"calibration: the temperature was {calibration.reason}")
    else:
        log.info(f"no calibration: {calibration.reason}")
    return calibrated_raw(calibration, validation_raw), calibration


def run_metrics(recipe: Recipe, core, corpus, state: LoopState, command: str | None, started_from, precision: str,
                 cache_seconds: float, stages: dict) -> RunMetrics:
    """What metrics.json holds, but the test metrics."""
    return RunMetrics(
        recipe=recipe.name,
        strategy=recipe.strategy.name,
        # The strategy's settings as the model was built with them (token_pooling's auto resolved).
        strategy_settings=dataclasses.asdict(core.settings.strategy),
        command=command,
        init_from=started_from or None,
        machine=describe_machine(),
        mixed_precision=precision,
        data=corpus.stats,
        label_names=corpus.label_names,
        trainable_parameters=core.trainable_parameters(),
        # With the stages before the main one (train.contrastive_pairs, train.head_first), their time too: what the
        # whole recipe took to train.
        train_seconds=cache_seconds + state.train_seconds + sum(s["train_seconds"] for s in stages.values()),
        **stages,  # contrastive_stage, self_training, head_stage: what each stage did
        steps=state.global_step,
        best_step=state.best_step,
        best_validation=state.best_metric,
        best_metric=recipe.train.best_metric,
        stopped_early_at_step=state.stopped_early_at_step,
        train_log=state.train_log,
        validation_history=state.history,
        thresholds=core.thresholds if is_multi_label(recipe.model.problem_type) else None,
    )


def test_and_write_results(recipe: Recipe, run_dir: Path, core, corpus, record: RunMetrics, validation_raw,
                            accelerator) -> None:
    """Write the kept model's validation predictions, evaluate it on the test split (into `record`), and write the
    predictions, metrics.json, metrics.md and the model card's test results."""
    multi_label = is_multi_label(recipe.model.problem_type)
    if validation_raw is not None and accelerator.is_main_process:
        write_predictions(run_dir / predictions_file("validation"), corpus.splits["validation"], validation_raw,
                          corpus.label_names, multi_label, core.thresholds if multi_label else None)
    if "test" in corpus.splits:
        test_metrics, raw = evaluate_split(core, corpus.splits["test"], recipe.eval.batch_size, description="test",
                                           process=accelerator.state)  # divided between the processes
        record.test = test_metrics
        calibration = record.calibration or {}
        if calibration.get("reason") and "calibration" in test_metrics:  # metrics.md says it
            said = "why_none" if calibration.get("method") == "none" else "caveat"
            test_metrics["calibration"][said] = calibration["reason"]
        if accelerator.is_main_process:
            write_predictions(run_dir / predictions_file("test"), corpus.splits["test"], raw,
                              corpus.label_names, multi_label, core.thresholds if multi_label else None)
    if accelerator.is_main_process:
        write_run_metrics(run_dir, record)
        page = metrics_markdown(record.test, corpus.label_names, f"{recipe.name}: test",
                                run_dir / RUN_CONFUSION_FILE) if record.test is not None else ""
        if write_training_curves(record, run_dir / CURVES_FILE):
            page += f"\n## Training\n\n![training loss and validation {recipe.train.best_metric}]({CURVES_FILE})\n"
        write_text_atomically(run_dir / METRICS_PAGE, page)
        if record.test is not None:
            core.training_facts.test = record.test
            refresh_card(run_dir / BEST, core)
