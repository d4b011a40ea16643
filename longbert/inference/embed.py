"""`longbert embed`: the document vector of every input text, the pooled vector the model's head reads, for search,
clustering or a classifier of one's own. Any strategy, any length: the documents are read as `predict` reads them
(the same inputs, blocks in input order, several processes under `accelerate launch`), so memory stays bounded
whatever the number of documents, and each vector is written as soon as those before it are.

    longbert embed MODEL INPUT -o vectors.npy     # numpy: np.load(...) -> (documents, hidden) float32, input order
    longbert embed MODEL INPUT -o vectors.jsonl   # one {"id", kept columns, "embedding": [...]} a line (datasets,
                                                  # pandas); ids as predict gives them
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from longbert.errors import LongbertError
from longbert.inference.exported import is_export_folder
from longbert.inference.predict import check_output as check_writable
from longbert.inference.predict import read_documents, rows_in_input_order
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.ensemble import refuse_ensemble
from longbert.utils.atomic import atomic_binary_stream, atomic_stream
from longbert.utils.hardware import check_precision, process_state
from longbert.utils.progress import progress

FORMATS = (".npy", ".jsonl")


@dataclass
class Embedding:
    """What `embed_file` did: documents embedded, the vector's size, and whether this process wrote the output."""

    documents: int
    size: int
    written: bool


def check_output(output: Path, source: str | Path | None = None, model_dir: str | Path | None = None) -> None:
    """Refuse an output that is not .npy or .jsonl, that cannot be written, or that is what the command reads
    (predict's check), before any work."""
    if output.suffix.lower() not in FORMATS:
        raise LongbertError(f"--output {output}: name a .npy file (numpy) or a .jsonl file (one vector a line)")
    check_writable(output, source, model_dir)


def embed_file(model_dir: str | Path, source: str, output: Path, batch_size: int = 16, text_column: str = "text",
               id_column: str | None = None, keep: tuple[str, ...] = (), precision: str = "auto",
               split: str | None = None) -> Embedding:
    """Embed every document of `source` (see `predict.read_documents`) with the model in `model_dir` and write the
    vectors to `output` (.npy or .jsonl, written under a temporary name and renamed when complete)."""
    if batch_size < 1:
        raise LongbertError(f"--batch-size must be >= 1, got {batch_size}")
    check_precision(precision, "--precision")
    output = Path(output)
    check_output(output, source, model_dir)
    if keep and output.suffix.lower() == ".npy":  # once dropped without a word
        raise LongbertError(f"--keep {', '.join(keep)}: a .npy file holds the vectors only; write a .jsonl file to "
                            "keep columns beside them")
    if is_export_folder(model_dir):
        raise LongbertError(f"{model_dir} is an exported folder (onnxruntime), which gives no document vectors; "
                            "embed with the PyTorch model folder it was exported from")
    process = process_state()
    documents = read_documents(source, text_column, id_column, tuple(keep), split)
    model = LongDocumentClassifier.from_pretrained(model_dir).to(process.device)
    refuse_ensemble(model, str(model_dir), "it has one document vector per member, not one: embed a member's run")
    if model.lexical is not None:  # once the neural half's vector, silently: not what the hybrid reads
        raise LongbertError(f"{model_dir} is a hybrid model: its TF-IDF half has no document vector; embed the run "
                            "its neural half came from")
    size = model.head.in_features
    read = lambda texts, b, p: ((i, {"embedding": v}) for i, v in model.embeddings_as_done(texts, b, p))
    rows = rows_in_input_order(model, documents, process, batch_size, precision, text_column, id_column, tuple(keep),
                               read)
    if not process.is_main_process:
        for _ in rows:  # every process takes part in every gather
            pass
        return Embedding(len(documents), size, False)
    rows = progress(rows, "embedding", total=len(documents))
    if output.suffix.lower() == ".npy":
        with atomic_binary_stream(output) as stream:
            np.lib.format.write_array_header_1_0(stream, {"descr": np.dtype("<f4").str, "fortran_order": False,
                                                          "shape": (len(documents), size)})
            for row in rows:
                stream.write(np.asarray(row["embedding"], dtype="<f4").tobytes())
    else:
        with atomic_stream(output) as stream:
            for row in rows:
                stream.write(json.dumps(row, default=str) + "\n")
    return Embedding(len(documents), size, True)
