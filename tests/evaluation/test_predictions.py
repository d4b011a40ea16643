"""PredictionRow, the one record of predictions-<split>.jsonl: what one writer writes, one reader reads back; files
of earlier versions (the baseline's rows without ids, rows with unit_weights null, a key this version does not know)
keep loading; a file that is not one is refused in one line naming the file and the line."""

from __future__ import annotations

import gzip
import json

import pytest

from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows, write_prediction_rows

ROWS = [
    PredictionRow(index=0, id="depth-0600-000001", n_tokens=1900, label=1, label_name="pos",
                  probabilities=[0.123456789, 0.876543211], predicted=1, predicted_label="pos",
                  unit_weights=[0.25, 0.75]),
    PredictionRow(index=1, n_tokens=40, label=[1, 0, 1], probabilities=[0.9, 0.2, 0.4], predicted=[1, 0, 0]),
]


def test_what_the_writer_writes_the_reader_reads_back_with_probabilities_rounded_once(tmp_path):
    write_prediction_rows(tmp_path / "single.jsonl", ROWS[:1])  # a file holds one problem type's rows
    write_prediction_rows(tmp_path / "predictions-test.jsonl", ROWS[1:])
    back = read_prediction_rows(tmp_path / "single.jsonl") + read_prediction_rows(tmp_path / "predictions-test.jsonl")
    assert back[0].probabilities == [0.123457, 0.876543]  # PROBABILITY_DIGITS, in the writer only
    assert back[0] == PredictionRow(**{**ROWS[0].__dict__, "probabilities": [0.123457, 0.876543]})
    assert back[1] == ROWS[1]
    assert [r.right for r in back] == [True, False]  # multi-label: every label must be right
    line = json.loads((tmp_path / "predictions-test.jsonl").read_text().splitlines()[0])
    assert sorted(line) == ["index", "label", "n_tokens", "predicted", "probabilities"]  # nothing it lacks


def test_files_of_earlier_versions_keep_loading(tmp_path):
    lines = [  # compare's TF-IDF rows (no ids, no names), evaluate's with unit_weights null, a key not known here
        {"index": 0, "n_tokens": 9, "label": 1, "predicted": 1, "probabilities": [0.2, 0.8]},
        {"index": 1, "id": 7, "n_tokens": 12, "label": 0, "label_name": "neg", "probabilities": [0.6, 0.4],
         "predicted": 0, "predicted_label": "neg", "unit_weights": None},
        {"index": 2, "n_tokens": 5, "label": 0, "predicted": 1, "probabilities": [0.3, 0.7], "future_key": "x"},
    ]
    path = tmp_path / "old.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:  # as committed under benchmarks/results/predictions
        out.write("\n".join(json.dumps(row) for row in lines) + "\n\n")
    rows = read_prediction_rows(path)
    assert [r.index for r in rows] == [0, 1, 2] and [r.right for r in rows] == [True, True, False]
    assert rows[0].id is None and rows[1].id == 7 and rows[1].unit_weights is None
    assert rows[2] == PredictionRow(index=2, n_tokens=5, label=0, predicted=1, probabilities=[0.3, 0.7])


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: not JSON (Expecting property name enclosed in double quotes)"),
    ('{"index": 3, "label": 1}', "line 2: not a prediction row (no n_tokens, probabilities, predicted)"),
    ("[1, 2]", "line 2: not a prediction row (no index, n_tokens, label, probabilities, predicted)"),
    # a row an ensemble or a hybrid could not average (once a numpy traceback): one line naming it
    ('{"index": 3, "n_tokens": 9, "label": 0, "probabilities": [1.0], "predicted": 0}',
     "line 2: probabilities must be a list of two or more finite numbers, one per class, got [1.0]"),
    ('{"index": 3, "n_tokens": 9, "label": 0, "probabilities": [0.1, 0.2, 0.7], "predicted": 2}',
     "line 2: 3 probabilities, where the file's first row has 2"),
    ('{"index": 3, "n_tokens": 9, "label": 0, "probabilities": [NaN, 0.5], "predicted": 1}',
     "line 2: probabilities must be a list of two or more finite numbers, one per class, got [nan, 0.5]"),
    ('{"index": 3, "n_tokens": 9, "label": 4, "probabilities": [0.5, 0.5], "predicted": 1}',
     "line 2: label 4 is not one of the 2 classes"),
])
def test_a_line_that_is_not_a_row_is_named_with_its_file_and_number(tmp_path, line, message):
    path = tmp_path / "predictions-test.jsonl"
    path.write_text(json.dumps(ROWS[0].to_dict()) + "\n" + line + "\n")
    with pytest.raises(LongbertError) as error:
        read_prediction_rows(path)
    assert str(error.value) == f"{path}, {message}"
