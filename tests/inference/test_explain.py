"""`longbert predict --explain`: each row says which tokens every unit covers and how much it weighed, names the unit
that decided as compare's error analysis does, and the HTML page highlights it with the text escaped."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from helpers import build_model
from longbert.cli import app
from longbert.inference.explain import explain, page_path, reading_classifier, render_page, where_it_looked

runner = CliRunner()
WORDS = "film plot actor scene music camera ending story director cast dull brilliant awful moving slow funny".split()
# A long text of varied words (so that chunk vectors differ), with markup throughout that must come out escaped.
LONG = " ".join(WORDS[(7 * i) % 13] + (" <script>alert('x')</script> & <b>" if i % 25 == 0 else "") for i in range(700))
TEXTS = ["A short review.", LONG]


@pytest.fixture(scope="module")
def attention_model(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=attention", "strategy.token_pooling=mean"])
    with torch.no_grad():  # sharper than a fresh pooler's near-uniform weights, as a trained one would be
        model.strategy.pooler.score.weight.mul_(100)
    return model


def test_rows_are_predicts_rows_with_units_and_the_decisive_one(attention_model):
    rows, read = explain(attention_model, TEXTS)
    expected = attention_model.predict(TEXTS)
    for row, same in zip(rows, expected):
        assert {k: row[k] for k in same} == same
    long = rows[1]
    windows, _ = attention_model.strategy.windows(torch.tensor(read[1]))
    assert len(long["units"]) == len(windows) > 1  # one unit per 40-token chunk, in order
    assert [u["tokens"] for u in long["units"]] == [[[40 * i, 40 * i + len(w)]] for i, w in enumerate(windows)]
    weights = [u["weight"] for u in long["units"]]
    assert sum(weights) == pytest.approx(1.0, abs=1e-3)  # attention weights
    decisive = long["decisive"]
    assert decisive["method"] == "weight" and decisive["unit"] == max(range(len(weights)), key=weights.__getitem__)
    assert decisive["spans"] == long["units"][decisive["unit"]]["tokens"]
    assert rows[0]["decisive"]["method"] == "kept" and len(rows[0]["units"]) == 1


def test_mean_pooling_finds_the_decisive_unit_by_occlusion(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "sliding", ["strategy.pooling=mean", "strategy.unit_weights=equal"])
    rows, _ = explain(model, [LONG])
    weights = {u["weight"] for u in rows[0]["units"]}
    assert len(weights) == 1  # mean pooling with equal weights: every window weighs the same
    assert rows[0]["decisive"]["method"] == "occlusion"


def test_cli_writes_rows_and_an_escaped_page(attention_model, tmp_path):
    attention_model.save_pretrained(tmp_path / "model")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    result = runner.invoke(app, ["predict", str(tmp_path / "model"), str(tmp_path / "in.jsonl"), "-o",
                                 str(tmp_path / "out.jsonl"), "--explain", str(tmp_path / "view")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [set(r) >= {"label", "probabilities", "n_tokens", "units", "decisive"} for r in rows] == [True, True]
    page = (tmp_path / "view" / "explain.html").read_text()
    assert page.count("<mark>") >= 1 and "<script>" not in page and "&lt;script&gt;" in page
    assert "Text 2: " in page and "(decisive)" in page

    result = runner.invoke(app, ["predict", str(tmp_path / "model"), str(tmp_path / "in.jsonl"), "--explain",
                                 str(tmp_path / "page.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "page.html").is_file() and len(result.output.splitlines()) == 2


def test_a_bad_explain_path_is_one_line(attention_model, tmp_path):
    (tmp_path / "in.txt").write_text("a text\n")
    (tmp_path / "file").write_text("")
    for target, message in ((tmp_path / "missing" / "page.html", "the folder"), (tmp_path / "file", "is a file"),
                            (tmp_path / "missing" / "dir", "does not exist")):
        result = runner.invoke(app, ["predict", str(tmp_path), str(tmp_path / "in.txt"), "--explain", str(target)])
        assert result.exit_code == 2
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: --explain ") and message in lines[0], result.output
    assert page_path(tmp_path / "new") == tmp_path / "new" / "explain.html"


def test_where_it_looked_shades_the_document_by_the_heaviest_unit_covering_each_stretch():
    # three windows over 10 tokens, the middle one overlapping both (as sliding's do), the last decisive
    units = [{"tokens": [[0, 4]], "weight": 0.2}, {"tokens": [[3, 7]], "weight": 0.1},
             {"tokens": [[6, 10]], "weight": 0.7}]
    cells = where_it_looked(units, 2, 10, cells=5)  # stretches of 2 tokens
    assert [round(shade, 3) for shade, _, _ in cells] == [round(0.2 / 0.7, 3), round(0.2 / 0.7, 3),
                                                         round(0.1 / 0.7, 3), 1.0, 1.0]
    assert [decisive for _, decisive, _ in cells] == [False, False, False, True, True]
    assert cells[0][2] == "tokens 1–2: weight 0.200"
    assert where_it_looked(units, 2, 3, cells=100) is not None and len(where_it_looked(units, 2, 3)) == 3
    assert where_it_looked([{"tokens": [[0, 10]], "weight": 1.0}], 0, 10) is None  # one unit: nothing to show
    assert where_it_looked([{**u, "weight": None} for u in units], 2, 10) is None  # no weights (transformer)


def test_a_truncating_models_page_shows_what_it_read_and_an_ensembles_names_its_member(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "truncate")  # keeps the first 30 and the last 70 content tokens
    rows, read = explain(model, TEXTS)
    long = rows[1]
    assert long["decisive"]["method"] == "kept" and len(read[1]) > 100
    long["member"] = "truncate-seed0"  # as an ensemble's row names the member surest of its label
    page = render_page([(TEXTS[0], rows[0], read[0]), (LONG, long, read[1])], model.tokenizer, "t")
    assert page.count("member truncate-seed0, the one surest") == 1  # the plain row names no member
    gap = len(read[1]) - 100
    assert f"[{gap:,} tokens not read]" in page and page.count('class="strip"') == 1  # the short text was read whole
    marked = page.split("<blockquote>")[1].split("</blockquote>")[0]
    assert marked.count("<mark>") == 2 and marked.index("<mark>") == 0  # the head it kept, then the tail
    assert "tokens not read" not in page.split("Text 1")[1].split("Text 2")[0]


def test_explain_at_int8_reads_its_units_in_the_quantized_copy(attention_model):
    """At int8 the rows are predict's at int8, and the units are read where that prediction was made: in the quantized
    copy that the int8 wrapper runs (its recheck re-reads whole documents, not units)."""
    assert reading_classifier(attention_model, "int8") is attention_model.for_precision("int8").quantized
    assert reading_classifier(attention_model, "fp32") is attention_model
    rows, _ = explain(attention_model, TEXTS, precision="int8")
    for row, same in zip(rows, attention_model.predict(TEXTS, precision="int8")):
        assert {k: row[k] for k in same} == same
    assert all(row["units"] and row["decisive"] is not None for row in rows)
