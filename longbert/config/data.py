"""The `data` section of a fine-tuning recipe: where the documents come from, which splits play which role, and how
they are carved and subsampled (validated as the rest of a recipe is, see longbert.config.validation); and what the
name of a local data file says (the kinds of file longbert reads, the split a file holds, the run a file names)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from longbert.config.validation import Validated, short_repr
from longbert.utils.fields import option

# The data files longbert reads, by how their names end, and the loader (datasets') that reads each.
FILE_KINDS = {".jsonl": "json", ".json": "json", ".jsonl.gz": "json", ".json.gz": "json", ".csv": "csv",
              ".csv.gz": "csv", ".tsv": "tsv", ".tsv.gz": "tsv", ".parquet": "parquet"}


def split_of(file: Path) -> str:
    """The split a data file holds, by its name: 'train.jsonl.gz' -> 'train'."""
    name = file.name
    for suffix in sorted(FILE_KINDS, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return file.stem


def local_data_name(path: str) -> str | None:
    """What a run of the documents at data.path `path` is called when its recipe gives no name: the local file (its
    stem: reviews.jsonl.gz -> reviews) or folder `path` names as it stands, as a plain folder name; None for a hub
    id, a name found under the data root, or documents in memory."""
    given = Path(path).expanduser()
    if not given.exists():
        return None
    name = split_of(given) if given.is_file() else Path(os.path.abspath(given)).name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-") or None


@dataclass
class DataConfig(Validated):
    SECTION = "data"

    path: str = option("imdb", "hub dataset id, a data file, a folder of <split> files, an aclImdb-style folder, or a "
                       "name under the data root")
    hub_config: str | None = option(None, "hub dataset configuration name (hub datasets only)")
    train_split: str = option("train", "split to train on")
    validation_split: str | None = option(None, "split to select checkpoints on; null carves validation_fraction from "
                                          "train")
    test_split: str | None = option("test", "split reported as the final result; null for none")
    text_column: str = option("text", "column holding the document text")
    label_column: str = option("label", "column holding the label (an int index, a label name, or a list of them for "
                               "multi-label)")
    unlabelled_split: str | None = option(None, "a split of documents without labels (IMDb's unsupervised) that "
                                          "train.self_training_documents draws from; its labels, if any, are "
                                          "ignored")
    id_column: str | None = option("id", "column of document ids, copied into prediction files when the data has it "
                                   "(else the row index)")
    label_names: list[str] | None = option(None, "class names in index order; null reads them from the data")
    validation_fraction: float = option(0.1, "share of train carved (seeded, stratified) into validation when there is "
                                        "no validation split")
    test_fraction: float = option(0.1, "share of a single data file carved (seeded, stratified) into the test split "
                                  "when data.path is one file and data.test_split is test; validation_fraction is "
                                  "then carved from the rest")
    max_train_documents: int | None = option(None, "seeded random subset of train (after carving validation); null for "
                                             "all")
    nested_train: bool = option(False, "draw the training subset as the first data.max_train_documents of one seeded "
                                "order, so that each smaller size's documents are part of every larger one's, and "
                                "validation's and test's draws do not depend on the size (compare --train-sizes)")
    max_eval_documents: int | None = option(None, "seeded random subset of validation and of test; null for all")
    max_test_documents: int | None = option(None, "seeded random subset of test when it should differ from "
                                            "validation's; null: data.max_eval_documents applies to test too")
    test_longer_than: int = option(0, "evaluate only the test documents longer than this many tokens ([CLS]/[SEP] "
                                   "included; 512: every document truncation cuts), before any subset is drawn; 0 "
                                   "keeps all")
    validation_longer_than: int | None = option(None, "choose (the kept step, early stopping, the calibration, "
                                                "compare's model) only on the validation documents longer than this "
                                                "many tokens; null: as data.test_longer_than, so that validation is "
                                                "drawn like the test. Where a carved validation holds fewer such "
                                                "documents than it holds in all, long training documents move into "
                                                "it (at most half of them), and the data line says how many; 0 "
                                                "keeps all")
    max_document_tokens: int = option(16384, "per-document token cap that protects memory; how many documents it cut "
                                      "is reported")
    seed: int | None = option(None, "seed of the data's carving and subsets; null: the recipe's seed. Pinned, runs "
                                    "that differ only in their seed train on the same documents (compare --seeds)")

    def validation_rule(self) -> int:
        """The length validation's documents must exceed (0: any): data.validation_longer_than, or when null the
        test's, data.test_longer_than, where there is a test split."""
        if self.validation_longer_than is not None:
            return self.validation_longer_than
        return self.test_longer_than if self.test_split else 0

    def problems(self, path: str) -> list[str]:
        out = []
        if not 0 < self.validation_fraction < 1:
            out.append(f"{path}.validation_fraction must be between 0 and 1, got {self.validation_fraction}")
        if not 0 < self.test_fraction < 1:
            out.append(f"{path}.test_fraction must be between 0 and 1, got {self.test_fraction}")
        for name in ("max_train_documents", "max_eval_documents", "max_test_documents"):
            value = getattr(self, name)
            if value is not None and value < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {value}")
        if self.max_document_tokens < 1:
            out.append(f"{path}.max_document_tokens must be >= 1, got {self.max_document_tokens}")
        for name in ("test_longer_than", "validation_longer_than"):
            if (getattr(self, name) or 0) < 0:
                out.append(f"{path}.{name} must be >= 0, got {getattr(self, name)}")
        if self.label_names is not None and len(set(self.label_names)) != len(self.label_names):
            out.append(f"{path}.label_names has duplicates: {short_repr(self.label_names)}")
        return out
