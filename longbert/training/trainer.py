"""The Trainer: one object owns a fine-tuning run, and the stages the recipe asks for are steps over its state.

    trainer = Trainer(recipe, model=None, train_dataset=None, eval_dataset=None, data=None, stop=None)
    result = trainer.train()           # trainer.train(resume=True): continue the run folder's checkpoint
    result.classifier.predict(texts)   # the kept model in memory, calibrated; result.folder: the run folder

What the run makes once, and every stage shares:
    the split and the corpus   read, cut into train/validation/test and tokenised once (RunInputs)
    the backbone               loaded once with its tokenizer; a stage trains a copy, the last one the loaded one
    the accelerator            one for the run; what a stage prepared is released before the next (free_memory)
    the stop request           Ctrl-C and SIGTERM set it; every stage checks it after each step
    the checkpoint             run_dir/checkpoint, which each stage writes in turn (its state.json names the stage)

The stages, in this order, each from what the one before left:
    contrastive pairs    train.contrastive_pairs: the backbone tuned on pairs of documents (training/contrastive.py)
    self-training        train.self_training_documents: a teacher labels unlabelled documents, the confident ones
                         join training (training/self_training.py)
    head stage           train.head_first: the pooler and head alone on the frozen backbone (training/head_stage.py)
    end to end           the recipe's model, trained, kept, calibrated, tested and written (training/finishing.py)
The head stage and the end-to-end stage train in memory over the run's state. The contrastive stage keeps its tuned
model in run_dir/contrastive_stage and the self-training teacher, trained by this Trainer over the same corpus, in
run_dir/self_training, where a person reads its pseudo-labels.

A run folder holds:
    recipe.yaml                the resolved recipe (what ran); data-split.json, how one data file was cut
    checkpoint/                the last resumable state (see longbert.training.checkpoint); written whole or not at all
    best/                      the kept model (best validation metric), loadable by LongDocumentClassifier and by
                               transformers' Auto classes; its model card (README.md) carries the test metrics
    metrics.json, metrics.md   training log (loss, learning rate, tokens/s), validation history, test metrics, timing,
                               data statistics, what each stage did, what train.init_from loaded
    predictions-test.jsonl     per-document test predictions (for error analysis)
    predictions-validation.jsonl  the kept model's validation predictions (compare's ensembles are chosen on them)
    logs/                      the tracker's files, when train.report_to names one that writes here (tensorboard)
    start/                     the model given to `train(model=...)`, which train.init_from names
One process writes a run folder at a time (longbert.training.start_or_resume locks it); what a killed run left there is
put right when the next run starts.
"""

from __future__ import annotations

import threading
from pathlib import Path

from accelerate.utils import set_seed

from longbert.config import Recipe
from longbert.data.carving import check_run_data_unchanged
from longbert.errors import LongbertError
from longbert.modeling.card import TrainingFacts
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.training.accelerator import check_tracker, start_accelerator, tracker_config
from longbert.training.checkpoint import END_TO_END, LoopState, read_stage, recipe_fingerprint
from longbert.training.contrastive import train_contrastive_stage
from longbert.training.finetune import build_stage_model, fit
from longbert.training.finishing import kept_model, restore_kept_model, run_metrics, test_and_write_results
from longbert.training.frozen import cache_splits
from longbert.training.head_stage import HeadStage, head_stage_recipe
from longbert.training.init_from import check_labels, in_memory, open_init_from
from longbert.training.run_inputs import RunInputs, load_inputs, say_what_is_read
from longbert.training.run_record import TrainResult
from longbert.training.selective import check_reading_before_training
from longbert.training.self_training import add_pseudo_labelled, train_teacher
from longbert.training.start_or_resume import open_run, write_recipe
from longbert.training.stopping import StopRequest
from longbert.training.train_inputs import as_recipe, recipe_and_documents, recipe_for_model, save_start
from longbert.utils.folders import BEST, CHECKPOINT, HEAD_STAGE, PSEUDO_FILE, SELF_TRAINING, TRACKER_LOGS


def train(recipe: Recipe | str | Path | None = None, *, model: LongDocumentClassifier | None = None,
          train_dataset=None, eval_dataset=None, data=None, resume: bool = False, command: str | None = None,
          stop: StopRequest | None = None) -> TrainResult:
    """Train `recipe` (a Recipe, a recipe file or packaged name; None: the defaults) into its run folder and evaluate
    the kept model on the test split, if any: `Trainer(...).train(resume)`. Returns a TrainResult (`classifier`: the
    kept model in memory; `folder`, `metrics`, `model`: <folder>/best). See Trainer for the arguments."""
    trainer = Trainer(recipe, model=model, train_dataset=train_dataset, eval_dataset=eval_dataset, data=data,
                      command=command, stop=stop)
    return trainer.train(resume=resume)


class Trainer:
    """One fine-tuning run. `model`: a LongDocumentClassifier to fine-tune; its backbone, strategy, problem type and
    classes are the run's, and it is saved as the run's start (see longbert.training.train_inputs). `train_dataset`,
    `eval_dataset`: documents in memory (Dataset, DataFrame, (texts, labels), rows, columns) to train and validate on
    (none: carved from train); `data`: documents by split instead of data.path (see longbert.data.objects).
    `command`: the command line, for the record. `stop`: checked after every optimiser step; once set, a checkpoint
    is written and TrainingInterrupted raised (Ctrl-C and SIGTERM set it; a second Ctrl-C stops at once)."""

    def __init__(self, recipe: Recipe | str | Path | None = None, *, model: LongDocumentClassifier | None = None,
                 train_dataset=None, eval_dataset=None, data=None, command: str | None = None,
                 stop: StopRequest | None = None):
        recipe, self.data = recipe_and_documents(as_recipe(recipe), train_dataset, eval_dataset, data)
        self.model = model
        self.recipe = recipe if model is None else recipe_for_model(recipe, model)
        self.command = command
        self.stop = threading.Event() if stop is None else stop
        self.inputs: RunInputs | None = None  # made once, when train() starts
        self._accelerator = None
        self.precision: str | None = None

    def train(self, resume: bool = False) -> TrainResult:
        """Run every stage the recipe asks for into the run folder (`resume`: continue from its checkpoint, with the
        same recipe, documents and model), then test and write the kept model."""
        recipe, run_dir = self.recipe, Path(self.recipe.output_dir)
        check_tracker(recipe.train.report_to)
        source = open_init_from(recipe) if self.model is None else None  # checked before the folder is touched
        if resume:  # a resumed run reads the documents its split was made of, or none
            check_run_data_unchanged(run_dir, f"train --resume {run_dir}")
        with open_run(run_dir, recipe, resume, self.stop) as resuming:
            if self.model is not None:
                save_start(self.model, recipe)
                source = open_init_from(recipe)
            self.inputs = load_inputs(recipe, self.data)
            if source is not None:  # the data's classes must be the earlier model's: one line, nothing printed before
                check_labels(source, self.inputs.corpus.label_names)
            say_what_is_read(recipe, self.inputs.corpus)
            return self._stages(recipe, run_dir, resuming, source, self.inputs.corpus, last=True)

    def accelerator(self):
        """The run's accelerator, started by the first stage that trains through it (the contrastive stage, which
        comes first, starts its own), with what the stage before prepared released."""
        if self._accelerator is None:
            cfg = self.recipe.train
            tracker = None if cfg.report_to == "none" else cfg.report_to
            self._accelerator, self.precision = start_accelerator(cfg.mixed_precision, cfg.gradient_accumulation,
                                                                  tracker, Path(self.recipe.output_dir))
        self._accelerator.free_memory()
        return self._accelerator

    def _stages(self, recipe: Recipe, run_dir: Path, resume: bool, source, corpus, last: bool) -> TrainResult:
        """The stages `recipe` asks for, in order, each starting from what the one before left (`source`: an
        InitSource, or None for the backbone as loaded), over `corpus`. `last`: the run itself, whose end-to-end stage
        may train the loaded backbone; not last: the self-training teacher, trained into its own folder."""
        stages = {}
        if recipe.train.contrastive_pairs:  # the backbone first tuned on pairs of documents (SetFit); the rest from it
            stages["contrastive_stage"], source = train_contrastive_stage(
                recipe, run_dir, source, self.stop, corpus, (self.inputs.backbone_for_stage(), self.inputs.tokenizer))
        if recipe.train.self_training_documents:  # a teacher from the same start; its confident labels join training
            taught = corpus.without("test")

            def run_teacher(teacher: Recipe, resume_teacher: bool, source):
                return self._stages(teacher, Path(teacher.output_dir), resume_teacher, source, taught, last=False)

            stages["self_training"] = train_teacher(recipe, run_dir, source, self.stop, run_teacher, self.data)
            corpus = add_pseudo_labelled(corpus.without(), run_dir / SELF_TRAINING / PSEUDO_FILE,
                                         self.inputs.tokenizer, recipe.data)
        head = None
        # The pooler and head first, on the frozen backbone; the whole model from there (a frozen run is that stage).
        if recipe.train.head_first and not recipe.model.backbone_frozen:
            head, resume = self._head_stage(recipe, run_dir, resume, source, corpus.without("test"))
            stages[HEAD_STAGE], source = head.summary, head.start
        return self._end_to_end(recipe, run_dir, resume, source, corpus, stages, head, last)

    def _head_stage(self, recipe: Recipe, run_dir: Path, resume: bool, source, corpus) -> tuple[HeadStage, bool]:
        """The head stage of `recipe`'s run, trained (resumed where the checkpoint is the stage's), or rebuilt where
        the checkpoint is the end-to-end stage's: the stage's model made again and its kept pooler and head loaded
        from the checkpoint. Returns the stage and whether the end-to-end stage resumes."""
        head = head_stage_recipe(recipe)
        saved = read_stage(run_dir / CHECKPOINT) if resume else None
        finished = saved is not None and saved[0].stage != HEAD_STAGE
        accelerator = self.accelerator()
        set_seed(head.seed)
        loaded = (self.inputs.backbone_for_stage(), self.inputs.tokenizer)
        model, _, class_weights = build_stage_model(head, corpus, loaded, source)
        check_reading_before_training(recipe, model, corpus, accelerator)  # the end-to-end stage's, before this one
        if finished:
            state, weights = saved
            if weights is None or HEAD_STAGE not in state.earlier:  # an earlier longbert kept the stage in a folder
                raise LongbertError(f"--resume: the checkpoint in {run_dir / CHECKPOINT} does not hold the head "
                                    "stage's weights (an earlier longbert wrote it); start the run again in another "
                                    "output_dir")
            model.load_head_state(weights)
            return HeadStage(in_memory(model, HEAD_STAGE), state.earlier[HEAD_STAGE]), True
        cached, cache_seconds = cache_splits(head, model, corpus, accelerator, untrained_allowed=True,
                                              stop=self.stop)
        state, model, best, _ = fit(head, model, corpus, cached, accelerator, run_dir, resume, self.stop,
                                    class_weights, started_trained=source is not None and source.head_trained,
                                    fingerprint=recipe_fingerprint(recipe), fresh=LoopState(stage=HEAD_STAGE))
        core = kept_model(model, best, accelerator)  # no calibration: the end-to-end model is calibrated
        summary = {"train_seconds": cache_seconds + state.train_seconds, "steps": state.global_step,
                   "best_validation": state.best_metric, "best_metric": head.train.best_metric}
        return HeadStage(in_memory(core, HEAD_STAGE), summary), False

    def _end_to_end(self, recipe: Recipe, run_dir: Path, resume: bool, source, corpus, stages: dict,
                    head: HeadStage | None, last: bool) -> TrainResult:
        """The recipe's model built from `source` around the loaded backbone, trained and validated on `corpus`, kept,
        calibrated, tested when the corpus has a test split, and written into `run_dir`."""
        cfg = recipe.train
        accelerator = self.accelerator()
        set_seed(recipe.seed)
        loaded = (self.inputs.backbone_for_stage(last), self.inputs.tokenizer)
        model, started_from, class_weights = build_stage_model(recipe, corpus, loaded, source)
        cached, cache_seconds = cache_splits(recipe, model, corpus, accelerator, untrained_allowed=False,
                                              stop=self.stop)
        if accelerator.is_main_process:
            write_recipe(run_dir, recipe, corpus.file_split)
        accelerator.wait_for_everyone()
        tracking = last and cfg.report_to != "none"
        if tracking:
            accelerator.init_trackers(TRACKER_LOGS, config=tracker_config(recipe))
        earlier = {HEAD_STAGE: head.summary} if head is not None else {}
        try:
            state, model, best, reading = fit(
                recipe, model, corpus, cached, accelerator, run_dir, resume, self.stop, class_weights,
                started_trained=source is not None and source.head_trained, fingerprint=recipe_fingerprint(recipe),
                fresh=LoopState(stage=END_TO_END, earlier=earlier),
                start=None if head is None else head.start_weights())
        finally:
            if tracking:
                accelerator.end_training()

        core, validation_raw, calibration = restore_kept_model(recipe, model, best, corpus, cached, accelerator)
        # The model card in best/ says what this run knew: written with the model, refreshed with the test metrics.
        validation = next((entry for entry in state.history if entry["step"] == state.best_step), None)
        core.training_facts = TrainingFacts.from_run(recipe, corpus.stats, self.command, cfg.best_metric, validation,
                                                     started_from)
        if accelerator.is_main_process:
            core.save_pretrained(run_dir / BEST)
        record = run_metrics(recipe, core, corpus, state, self.command, started_from, self.precision, cache_seconds,
                             stages)
        record.calibration = None if calibration is None else calibration.to_dict()
        record.reading = None if reading is None else {**reading.record(), "seconds": round(state.train_seconds, 2)}
        test_and_write_results(recipe, run_dir, core, corpus, record, validation_raw, accelerator)
        return TrainResult.from_run(run_dir, record, core.eval())
