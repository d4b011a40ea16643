"""A run's picture: the training loss and the validation metric against the step, the kept step starred; nothing
written for a run that logged neither."""

from __future__ import annotations

import pytest

import longbert.evaluation.plots as plots
import longbert.training.curves as curves
from helpers import run_record as record


def test_the_curves_show_the_log_and_the_history_with_the_kept_step_starred(tmp_path, monkeypatch):
    drawn = []
    png = plots.png
    monkeypatch.setattr(plots, "png", lambda fig, tight=True: drawn.append(fig) or png(fig, tight))
    metrics = record(best_metric="macro_f1", best_step=20,
                     train_log=[{"step": 10, "loss": 0.7}, {"step": 20, "loss": 0.5}, {"step": 30, "loss": 0.4}],
                     validation_history=[{"step": 10, "macro_f1": 0.6}, {"step": 20, "macro_f1": 0.8},
                                         {"step": 30, "macro_f1": 0.7}])
    assert curves.write_training_curves(metrics, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    left, right = drawn[0].axes
    assert list(left.lines[0].get_ydata()) == [0.7, 0.5, 0.4]
    assert list(right.lines[0].get_xdata()) == [10, 20, 30]
    star = right.lines[1]
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([20], [0.8])
    assert right.get_ylabel() == "validation macro_f1"


def test_a_run_that_logged_nothing_gets_no_picture(tmp_path):
    assert not curves.write_training_curves(record(), tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("missing", ["train_log", "validation_history"])
def test_one_curve_alone_is_drawn_and_the_other_says_not_logged(tmp_path, missing):
    logged = {"train_log": [{"step": 1, "loss": 0.6}], "validation_history": [{"step": 2, "accuracy": 0.7}]}
    metrics = record(best_step=2, **{**logged, missing: []})
    assert curves.write_training_curves(metrics, tmp_path / "c.png")
