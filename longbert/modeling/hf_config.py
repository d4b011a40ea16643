"""LongbertConfig: the config.json of a longbert model folder, which tells transformers' AutoConfig (and through it
AutoModelForSequenceClassification and pipeline) that the folder holds a longbert model.

It holds what transformers itself reads (model type, architecture, label names, problem type) and nothing else:
longbert_config.json (`ModelSettings`) stays the source of truth, and config.json is written from it on every save.
Importing this module registers the config with AutoConfig (`longbert.hf.hook` imports it when transformers loads
its Auto configs); it imports no other longbert module, so that it can run in the middle of transformers' import.
"""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig

MODEL_TYPE = "longbert"
ARCHITECTURE = "LongbertForSequenceClassification"
# longbert's problem types under transformers' names (what pipelines read to pick softmax or sigmoid).
PROBLEM_TYPES = {"single_label": "single_label_classification", "multi_label": "multi_label_classification"}


class LongbertConfig(PretrainedConfig):
    """Model type "longbert": id2label / label2id name the classes, problem_type is transformers' name of single- or
    multi-label classification."""

    model_type = MODEL_TYPE

    @classmethod
    def from_settings(cls, settings) -> "LongbertConfig":
        """The config.json of a model with these `ModelSettings`."""
        return cls(
            architectures=[ARCHITECTURE],
            id2label=dict(enumerate(settings.label_names)),
            label2id={name: i for i, name in enumerate(settings.label_names)},
            problem_type=PROBLEM_TYPES[settings.problem_type],
        )

    def label_names(self) -> list[str]:
        """The class names in index order."""
        return [self.id2label[i] for i in range(len(self.id2label))]


AutoConfig.register(MODEL_TYPE, LongbertConfig, exist_ok=True)
