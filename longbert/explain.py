"""`longbert predict --explain`: per document, how much each chunk or window weighed in the prediction and which
one decided it, as two more fields of each prediction row and as an HTML page that highlights the decisive passage.

    units     [{"tokens": [[start, end], ...], "weight": w or null}, ...]: each unit's content-token ranges (0-based,
              end excluded, [CLS]/[SEP] not counted; the strategy's `unit_spans` hook) and its weight in the pooling
              (null where the pooler gives none, e.g. the transformer pooler); null when the strategy does not say
              which tokens its units cover
    decisive  the unit that decided, found as compare's error analysis finds it (`analysis.decisive_units`): the
              heaviest unit when the pooling weighs them (attention, max), else the unit whose removal lowers the
              predicted class's probability most (occlusion, for mean pooling); for truncate, the tokens it kept

The page reuses the comparison report's renderer (text escaped) and its excerpts around the decisive unit.
"""

from __future__ import annotations

from pathlib import Path

import torch

from longbert.errors import LongbertError

PAGE_NAME = "explain.html"


def explain(model, texts: list[str], batch_size: int = 16) -> tuple[list[dict], list[list[int]]]:
    """Texts -> (`model.predict`'s rows with `units` and `decisive` added, each text's content ids as read)."""
    from longbert.analysis import decisive_units
    from longbert.hardware import autocast_for
    from longbert.model import check_texts, prediction_rows
    from longbert.strategies.base import unit_spans

    check_texts(texts)
    model.eval()
    rows, read, weights, predicted = [], [], [], []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            documents, lengths = model.tokenize(texts[start : start + batch_size])
            with autocast_for(model):
                out = model(documents)
                probabilities = model.probabilities(out.logits)  # (B, C)
            rows += prediction_rows(model.settings, probabilities, lengths)
            read += [d.tolist() for d in documents]
            for b in range(len(documents)):
                w = out.unit_weights
                weights.append(None if w is None else w[b][out.unit_mask[b]].float().cpu().tolist())
            if model.multi_label:
                thresholds = torch.tensor(model.thresholds)
                predicted += (probabilities.float().cpu() >= thresholds).int().tolist()
            else:
                predicted += probabilities.argmax(-1).tolist()
    units_of = [{"input_ids": ids} for ids in read]
    analysed = [{"unit_weights": w, "predicted": p} for w, p in zip(weights, predicted)]
    decisive = decisive_units(model, units_of, analysed, list(range(len(texts))))
    for i, row in enumerate(rows):
        spans = unit_spans(model.strategy, len(read[i]))
        w = weights[i] if weights[i] is not None and spans is not None and len(weights[i]) == len(spans) else None
        row["units"] = None if spans is None else [
            {"tokens": [list(s) for s in unit], "weight": None if w is None else round(w[u], 6)}
            for u, unit in enumerate(spans)]
        row["decisive"] = decisive[i]
    return rows, read


def page_path(target: str | Path) -> Path:
    """--explain's argument -> the HTML file to write: a path ending in .html is that file; anything else is a folder
    (made when missing, in a folder that exists) that gets explain.html. Checked before any work is done."""
    target = Path(target)
    if target.suffix.lower() == ".html":
        if target.is_dir():
            raise LongbertError(f"--explain {target} is a folder; name an .html file or a folder without .html")
        if not target.parent.is_dir():
            raise LongbertError(f"--explain {target}: the folder {target.parent} does not exist")
        return target
    if target.exists() and not target.is_dir():
        raise LongbertError(f"--explain {target} is a file; name an .html file or a folder")
    if not target.exists() and not target.parent.is_dir():
        raise LongbertError(f"--explain {target}: the folder {target.parent} does not exist")
    return target / PAGE_NAME


def render_page(texts: list[str], rows: list[dict], read: list[list[int]], tokenizer, title: str) -> str:
    """The HTML page: per text, its prediction, how the decisive unit was found, an excerpt with that unit
    highlighted, and every unit's token range and weight."""
    from longbert.analysis import decisive_excerpt
    from longbert.report import decisive_text, render_html

    blocks: list[tuple] = [("h", 1, title), ("p", (
        "For each text: the predicted label, the unit (chunk or window) that decided it, highlighted in the text, and "
        "how much every unit weighed in the pooling. Where the pooling weighs all units the same (mean), the decisive "
        "unit is the one whose removal lowers the predicted class's probability most."))]
    for i, (text, row, ids) in enumerate(zip(texts, rows, read)):
        label = row.get("label") or ", ".join(row.get("labels", [])) or "(none)"
        p = max(row["probabilities"].values()) if "label" in row else None
        heading = f"Text {i + 1}: {label}" + (f" (p = {p:.2f})" if p is not None else "") + f", {row['n_tokens']:,} tokens"
        blocks += [("h", 2, heading), ("p", f"Decisive part: {decisive_text(row['decisive'])}")]
        segments = decisive_excerpt(text, ids, row["decisive"], tokenizer)
        if segments:
            blocks.append(("quote", [(s["text"], "mark" if s["highlight"] else None) for s in segments]))
        units = row["units"] or []
        if len(units) > 1:
            chosen = (row["decisive"] or {}).get("unit")
            table = [[f"{u + 1}" + (" (decisive)" if u == chosen else ""),
                      " + ".join(f"{a + 1:,}–{b:,}" for a, b in unit["tokens"]),
                      "n/a" if unit["weight"] is None else f"{unit['weight']:.3f}"] for u, unit in enumerate(units)]
            blocks.append(("table", ["unit", "tokens", "pooling weight"], table))
    return render_html(blocks, {}, title)


def explain_file(model_dir: str | Path, source: str, output: Path | None, batch_size: int, target: str | Path):
    """`longbert predict --explain TARGET`: the prediction rows of `predict_file`, with `units` and `decisive`, to
    `output` (None: stdout), and the HTML page to TARGET (see `page_path`). Inputs, the output path and TARGET are
    checked before the model loads. Returns predict's `Prediction`."""
    from longbert.atomic import write_text_atomically
    from longbert.data import count_cut
    from longbert.model import LongDocumentClassifier
    from longbert.predict import Prediction, check_output, read_texts, write_jsonl

    if batch_size < 1:
        raise LongbertError(f"--batch-size must be >= 1, got {batch_size}")
    check_output(output)
    page = page_path(target)
    texts = read_texts(source)
    model = LongDocumentClassifier.from_pretrained(model_dir)
    rows, read = explain(model, texts, batch_size)
    write_jsonl(rows, output)
    page.parent.mkdir(exist_ok=True)
    write_text_atomically(page, render_page(texts, rows, read, model.tokenizer, f"longbert predict --explain: {model_dir}"))
    cap = model.settings.max_document_tokens
    return Prediction(rows, count_cut([row["n_tokens"] for row in rows], cap), cap)
