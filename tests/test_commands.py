"""How every command starts: `longbert --help` and `longbert train --help` load no torch (the start-up that every
command runs first, `commands.start_up`, included), so that help and a mistyped option answer at once."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "accelerate")


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"]], ids=" ".join)
def test_help_loads_no_torch(args):
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom longbert.cli import app\n"
            f"answer = CliRunner().invoke(app, {args!r})\n"
            "assert answer.exit_code == 0 and 'Usage' in answer.output, answer.output\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert loaded.strip() == "[]"


def test_the_start_up_runs_before_a_commands_help():
    """`train --help` goes through the group's start-up (where freed memory is kept): the start-up is what must stay
    light, not only the help text."""
    code = ("import sys\nfrom typer.testing import CliRunner\nimport longbert.commands\nfrom longbert.cli import app\n"
            "calls = []\nlongbert.commands.keep_freed_memory = lambda: calls.append(1) or True\n"
            "assert CliRunner().invoke(app, ['train', '--help']).exit_code == 0\nprint(calls, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[1] False"
