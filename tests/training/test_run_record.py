"""RunMetrics, the one record of a run's metrics.json: what the writer writes the reader reads back unchanged, key
order included; files of earlier versions (no strategy_settings or mixed_precision, a key this version does not
know) keep loading; a file that is not a run's metrics is named in one line."""

from __future__ import annotations

import dataclasses
import json

import pytest

from helpers import run_record
from longbert.errors import LongbertError
from longbert.result import Result
from longbert.training.run_record import TrainResult, read_run_metrics, write_run_metrics


def test_what_the_writer_writes_the_reader_reads_back_and_absent_stages_stay_absent(tmp_path):
    record = run_record(head_stage={"train_seconds": 2.0, "steps": 9, "best_validation": 0.7,
                                    "best_metric": "accuracy"}, test={"accuracy": 0.75}, command="longbert train x")
    write_run_metrics(tmp_path, record)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert "init_from" not in written and "thresholds" not in written and "contrastive_stage" not in written
    assert written["stopped_early_at_step"] is None  # always written, as before
    assert list(written)[:3] == ["recipe", "strategy", "strategy_settings"] and list(written)[-1] == "test"
    assert read_run_metrics(tmp_path) == record
    result = TrainResult.from_run(tmp_path, record)
    assert result.metrics == written  # train's dict, as it has always been
    assert (result.folder, result.model, result.record) == (tmp_path, tmp_path / "best", record)


def test_a_train_result_is_a_result_and_cannot_be_changed(tmp_path):
    result = TrainResult.from_run(tmp_path, run_record())
    assert isinstance(result, Result) and [f.name for f in dataclasses.fields(result)] == [
        "folder", "metrics", "model", "record", "classifier"]
    assert result.classifier is None, "read from a folder: no model in memory"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.folder = tmp_path / "elsewhere"
    assert not hasattr(result, "run_dir")


def test_files_of_earlier_versions_keep_loading(tmp_path):
    old = run_record().to_dict()
    del old["strategy_settings"], old["mixed_precision"]  # written before they were recorded
    old["a_later_key"] = 1
    (tmp_path / "metrics.json").write_text(json.dumps(old))
    record = read_run_metrics(tmp_path)
    assert record.strategy_settings is None and record.mixed_precision is None and record.steps == 30


@pytest.mark.parametrize("text, message", [
    ("{", "is not JSON (Expecting property name enclosed in double quotes, line 1)"),
    ("[1]", "is not a run's metrics (not a JSON object)"),
    ('{"recipe": "r"}', "is not a run's metrics (no strategy, machine, data, label_names"),
])
def test_a_file_that_is_not_a_runs_metrics_is_named(tmp_path, text, message):
    (tmp_path / "metrics.json").write_text(text)
    with pytest.raises(LongbertError) as error:
        read_run_metrics(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'metrics.json'} {message}")
