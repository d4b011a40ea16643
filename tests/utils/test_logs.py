"""Status lines go through logging, on stderr, at a verbosity set by --quiet/--verbose, LONGBERT_VERBOSITY or
longbert.set_verbosity; stdout keeps only what a command gives; bad settings are one line."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import longbert
from longbert.cli import app
from longbert.comparison.formatting import say
from longbert.utils.logs import get_logger, get_verbosity, set_verbosity

runner = CliRunner()


@pytest.fixture(autouse=True)
def restore_verbosity():
    before = get_verbosity()
    yield
    set_verbosity(before)


def test_status_lines_are_on_stderr_and_quiet_keeps_warnings_only(capsys):
    say("training chunk")
    captured = capsys.readouterr()
    assert captured.err == "compare: training chunk\n" and captured.out == ""
    longbert.set_verbosity("warning")
    assert longbert.get_verbosity() == logging.WARNING
    say("training chunk")
    get_logger("longbert.anything").warning("this may need you")
    assert capsys.readouterr().err == "this may need you\n"
    with pytest.raises(longbert.LongbertError, match="verbosity must be one of debug, info, warning, error, got 'x'"):
        longbert.set_verbosity("x")


@pytest.mark.heavy
@pytest.mark.parametrize("flag, shown", [(None, True), ("--quiet", False), ("-q", False), ("--verbose", True)])
def test_quiet_silences_trainings_status_lines_and_keeps_the_result(tiny_recipe, flag, shown):
    overrides = [item for o in tiny_recipe + ["train.epochs=1"] for item in ("--set", o)]
    result = runner.invoke(app, ([flag] if flag else []) + ["train", *overrides])
    assert result.exit_code == 0, result.output
    assert ("validation macro_f1" in result.output) == shown and ("data: " in result.output) == shown


@pytest.mark.parametrize("environment, args, message", [
    ("loud", ["strategies"], "error: LONGBERT_VERBOSITY must be one of debug, info, warning, error, got 'loud'"),
    (None, ["-q", "-v", "strategies"], "error: --quiet and --verbose contradict each other: give one"),
])
def test_a_bad_verbosity_is_one_line_before_any_work(environment, args, message):
    import os

    env = {k: v for k, v in os.environ.items() if k != "LONGBERT_VERBOSITY"}
    if environment:
        env["LONGBERT_VERBOSITY"] = environment
    done = subprocess.run([sys.executable, "-m", "longbert.cli", *args], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [message] and done.stdout == ""


def test_the_environment_sets_the_level_a_library_user_gets():
    code = ("import logging, longbert; from longbert.utils.logs import get_logger; "
            "get_logger('longbert.x').info('hidden'); get_logger('longbert.x').warning('shown'); "
            "print(longbert.get_verbosity() == logging.WARNING)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, "LONGBERT_VERBOSITY": "WARNING"})
    assert done.stdout.strip() == "True" and done.stderr == "shown\n"
