"""`longbert predict --explain`: per document, how much each chunk or window weighed in the prediction and which
one decided it, as two more fields of each prediction row and as an HTML page that highlights the decisive passage.

    units     [{"tokens": [[start, end], ...], "weight": w or null}, ...]: each unit's content-token ranges (0-based,
              end excluded, [CLS]/[SEP] not counted; the strategy's `unit_spans` hook) and its weight in the pooling
              (null where the pooler gives none, e.g. the transformer pooler); null when the strategy does not say
              which tokens its units cover
    decisive  the unit that decided, found as compare's error analysis finds it (`analysis.decisive_units`): the
              heaviest unit when the pooling weighs by content (attention, max), else (mean pooling, whose weights
              only count tokens) the unit whose removal lowers the predicted class's probability most (occlusion);
              for truncate, the tokens it kept

Each document is read once more for its units (and, for occlusion, its pooling and head once per unit), after its
prediction: explaining costs about one more forward pass. The page keeps every document's text until the end, so
it is meant for inspecting a file of documents, not a corpus. It reuses the comparison report's renderer (text
escaped) and its excerpts around the decisive unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from longbert.errors import LongbertError
from longbert.inference.attribution import (
    Reading,
    decisive_excerpt,
    decisive_text,
    decisive_units,
    excerpt,
    token_offsets,
)
from longbert.modeling.ensemble import alone, member_probabilities
from longbert.modeling.int8 import Int8Model
from longbert.modeling.reads_texts import decision
from longbert.strategies.base import unit_spans
from longbert.utils.atomic import disk_error, write_text_atomically
from longbert.utils.destinations import writable_destination
from longbert.utils.hardware import autocast_for
from longbert.utils.pages import render_html

PAGE_NAME = "explain.html"


def unit_details(model, ids: list[int], row: dict, precision: str = "auto") -> dict:
    """One document's content ids (as read: cut at max_document_tokens) and its prediction row -> the `units` and
    `decisive` fields (see the module docstring)."""
    autocast = autocast_for(model, precision)
    model = reading_classifier(model, precision)  # the weights as the prediction used them (int8: the quantized copy)
    device = next(model.parameters()).device
    if model.ensemble is not None:  # the member surest of the predicted label, and where it looked
        return surest_member_details(model, ids, row, precision, autocast, device)
    with torch.no_grad(), autocast:
        units = model.encode([torch.tensor(ids, dtype=torch.long, device=device)])  # (1, N, H)
        pooled = model.strategy.pool(units)
    weights = None if pooled.weights is None else pooled.weights[0][units.mask[0]].float().cpu().tolist()
    answer = answered(model, row)
    if "labels" in answer:  # multi-label: which labels were predicted, as decisive_units expects them
        predicted = [int(name in answer["labels"]) for name in model.label_names]
    else:
        predicted = model.label_names.index(answer["label"])
    decisive = decisive_units(model, [{"input_ids": ids}], [Reading(predicted, weights)], [0])[0]
    spans = unit_spans(model.strategy, len(ids))
    if weights is not None and (spans is None or len(weights) != len(spans)):
        weights = None
    listed = None if spans is None else [
        {"tokens": [list(s) for s in unit], "weight": None if weights is None else round(weights[u], 6)}
        for u, unit in enumerate(spans)]
    return {"units": listed, "decisive": decisive}


def surest_member_details(model, ids: list[int], row: dict, precision: str, autocast, device) -> dict:
    """An ensemble's `units` and `decisive` fields: those of the member that gave the predicted label the highest
    probability (named in `member`), since each member reads the document in units of its own. `model` runs at
    `precision` already (an int8 copy's members are quantized: they are read as they are, not quantized again)."""
    label = model.label_names.index(answered(model, row)["label"])
    with torch.no_grad(), autocast:
        probabilities = member_probabilities(model, [torch.tensor(ids, dtype=torch.long, device=device)])
    surest = max(range(len(probabilities)), key=lambda m: float(probabilities[m][0, label]))
    member_precision = "fp32" if precision == "int8" else precision
    names = model.ensemble.facts.members
    if surest == 0:  # the holding model, read without the others
        with alone(model):
            return {**unit_details(model, ids, row, member_precision), "member": names[0]}
    return {**unit_details(model.ensemble.others[surest - 1], ids, row, member_precision), "member": names[surest]}


def answered(model, row: dict) -> dict:
    """The row's label (labels); for a row abstained on (`predict --min-confidence`), those the model would have
    answered, so that its page still shows where the model looked."""
    return decision(model.settings, list(row["probabilities"].values())) if row.get("abstained") else row


def document_ids(model, text: str) -> list[int]:
    """The content ids the model reads for `text` (cut at max_document_tokens)."""
    documents, _ = model.tokenize([text])
    return documents[0].tolist()


def explain(model, texts: list[str], batch_size: int = 16,
            precision: str = "auto") -> tuple[list[dict], list[list[int]]]:
    """Texts -> (`model.predict`'s rows with `units` and `decisive` added, each text's content ids as read)."""
    rows = model.predict(texts, batch_size, precision)
    read = [document_ids(model, text) for text in texts]
    for row, ids in zip(rows, read):
        row.update(unit_details(model, ids, row, precision))
    return rows, read


def page_path(target: str | Path) -> Path:
    """--explain's argument -> the HTML file to write: a path ending in .html is that file; anything else is a folder
    (made when missing, in a folder that exists) that gets explain.html. Checked, down to writing a probe file there,
    before any work is done."""
    target = Path(target)
    if target.suffix.lower() == ".html":
        if target.is_dir():
            raise LongbertError(f"--explain {target} is a folder; name an .html file or a folder without .html")
        if not target.parent.is_dir():
            raise LongbertError(f"--explain {target}: the folder {target.parent} does not exist")
        page, make_folder = target, False
    else:
        if target.exists() and not target.is_dir():
            raise LongbertError(f"--explain {target} is a file; name an .html file or a folder")
        if not target.exists() and not target.parent.is_dir():
            raise LongbertError(f"--explain {target}: the folder {target.parent} does not exist")
        page, make_folder = target / PAGE_NAME, True
    writable_destination(page, "--explain", make_folder)
    return page


def explained(model, texts, rows: Iterator[dict], shown: list, precision: str = "auto") -> Iterator[dict]:
    """`predict`'s rows in input order, each with `units` and `decisive` added (`texts[i]` is row i's text); what the
    page shows of each is appended to `shown`, for `write_page` once the rows are safely written."""
    for i, row in enumerate(rows):
        text = texts[i]
        ids = document_ids(model, text)
        row.update(unit_details(model, ids, row, precision))
        shown.append((text, row, ids))
        yield row


def write_page(page: Path, shown: list, tokenizer, title: str, rows_note: str) -> None:
    """Write the HTML page of `shown` to `page` (whole or not at all). It is written after the rows, so a failure
    loses no prediction: it is one LongbertError line ending with `rows_note`, which says where the rows are."""
    try:
        page.parent.mkdir(exist_ok=True)
        write_text_atomically(page, render_page(shown, tokenizer, title))
    except OSError as error:
        raise LongbertError(f"{disk_error(error, page)}; {rows_note}") from None
    except LongbertError as error:
        raise LongbertError(f"{error}; {rows_note}") from None


def stretches(tokens: int, cells: int = 100) -> list[tuple[int, int]]:
    """A document of `tokens` tokens as `cells` equal stretches [a, b) (one a token for a shorter one): the cells of
    a page's strip."""
    cells = min(cells, tokens)
    return [(c * tokens // cells, max((c + 1) * tokens // cells, c * tokens // cells + 1)) for c in range(cells)]


def where_it_looked(units: list[dict] | None, decisive: int | None, tokens: int,
                    cells: int = 100) -> list[tuple[float, bool, str]] | None:
    """The document as `cells` equal stretches of tokens (fewer for a shorter one): each one's shade, the largest
    pooling weight of a unit covering it over the largest weight of all (overlapping windows take their larger
    weight), whether the decisive unit covers it, and a tooltip. None where there is nothing to draw: one unit, or
    no weights."""
    if not units or len(units) < 2 or any(u["weight"] is None for u in units) or tokens < 1:
        return None
    top = max(u["weight"] for u in units) or 1.0
    out = []
    for a, b in stretches(tokens, cells):
        covering = [i for i, u in enumerate(units) if any(s < b and e > a for s, e in u["tokens"])]
        weight = max((units[i]["weight"] for i in covering), default=0.0)
        out.append((weight / top, decisive in covering, f"tokens {a + 1:,}–{b:,}: weight {weight:.3f}"))
    return out


def render_page(shown: list[tuple[str, dict, list[int]]], tokenizer, title: str) -> str:
    """The HTML page for (text, row with units and decisive, content ids) triples: per text, its prediction, how
    the decisive unit was found, an excerpt with that unit highlighted, and every unit's token range and weight."""
    blocks: list[tuple] = [("h", 1, title), ("p", (
        "For each text: the predicted label, the unit (chunk or window) that decided it, highlighted in the text, and "
        "how much every unit weighed in the pooling. Where the pooling weighs all units the same, the decisive unit "
        "is the one whose removal lowers the predicted class's probability most."))]
    for i, (text, row, ids) in enumerate(shown):
        label = row.get("label") or ", ".join(row.get("labels") or []) or "(none)"
        p = row["probabilities"][row["label"]] if row.get("label") is not None else None
        if row.get("abstained"):  # what follows is where it looked for the answer it did not give
            label = "abstained below --min-confidence (what follows is for its likeliest answer)"
            if "labels" not in row:  # single-label: name the class it would have given, and its probability
                likeliest = max(row["probabilities"], key=row["probabilities"].get)
                label, p = f"{label}: {likeliest}", row["probabilities"][likeliest]
        name = f"Text {i + 1}" + (f" (id {row['id']})" if "id" in row and row["id"] != i else "")
        heading = f"{name}: {label}" + (f" (p = {p:.2f})" if p is not None else "") + f", {row['n_tokens']:,} tokens"
        blocks.append(("h", 2, heading))
        if row.get("member"):  # an ensemble: what follows is where its surest member looked
            blocks.append(("p", f"Read by the ensemble's member {row['member']}, the one surest of the predicted "
                                "label (each member reads the document in units of its own)."))
        blocks.append(("p", f"Decisive part: {decisive_text(row['decisive'])}"))
        strip = where_it_looked(row["units"], (row["decisive"] or {}).get("unit"), len(ids))
        if strip is not None:
            blocks += [("p", "Where it looked, along the document (darker: more pooling weight; underlined: the "
                        "decisive unit):"), ("strip", strip, "start", f"token {len(ids):,}")]
        kept = kept_blocks(text, ids, row["decisive"], tokenizer)
        blocks += kept
        segments = None if kept else decisive_excerpt(text, ids, row["decisive"], tokenizer, whole=True)
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


def kept_blocks(text: str, ids: list[int], decisive: dict | None, tokenizer) -> list[tuple]:
    """For a model that reads one unit of a document it cut (truncation): a strip of which stretches it kept, and the
    kept text with the gaps it never read named. Nothing for other models, or for a document read whole."""
    if not decisive or decisive.get("method") != "kept":
        return []
    spans = [(a, min(b, len(ids))) for a, b in decisive["spans"] if a < min(b, len(ids))]
    if not spans or sum(b - a for a, b in spans) >= len(ids):
        return []
    strip = []
    for a, b in stretches(len(ids)):
        seen = any(s < b and e > a for s, e in spans)
        strip.append((1.0 if seen else 0.0, seen, f"tokens {a + 1:,}–{b:,}: {'read' if seen else 'not read'}"))
    offsets = token_offsets(tokenizer, text, ids)
    quote: list[tuple[str, str | None]] = []
    read_to = 0  # where the previous kept span ended
    for a, b in spans:
        if a > read_to:
            quote.append((f" … [{a - read_to:,} tokens not read] … ", None))
        read_to = b
        if offsets is None:  # a slow tokenizer: decode the kept tokens
            quote.append((tokenizer.decode(ids[a:b]), "mark"))
        else:
            quote += [(s["text"], "mark") for s in excerpt(text, offsets, (a, b), context=0, head=b - a)
                      if s["highlight"]]
    if read_to < len(ids):
        quote.append((f" … [{len(ids) - read_to:,} tokens not read]", None))
    return [("p", "What it read, along the document (dark and underlined: the tokens it kept):"),
            ("strip", strip, "start", f"token {len(ids):,}"), ("quote", quote)]


def reading_classifier(model, precision: str):
    """The classifier whose layers read a document when `model` predicts at `precision`, for what looks inside a
    reading (explain's units and pooling): `model.for_precision(precision)`, or for int8 its quantized copy (the
    recheck re-reads whole documents, not units)."""
    runner = model.for_precision(precision)
    return runner.quantized if isinstance(runner, Int8Model) else runner
