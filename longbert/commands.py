"""How every `longbert` command runs (`run_command`): a user error is one line on stderr and exit 2, a command stopped
by Ctrl-C exits 130 and by SIGTERM 143, and a process group joined under torchrun is torn down; and how its help
reads (`classic_metavars`); and the options of the commands that answer with a model."""

from __future__ import annotations

import contextlib
import inspect
import os
import shlex
import signal
import sys
import threading
import typing
from pathlib import Path
from typing import Callable

import typer
from typer.core import TyperGroup
from typer.models import ArgumentInfo, OptionInfo

from longbert.errors import LongbertError
from longbert.training.stopping import TrainingInterrupted
from longbert.utils.allocator import keep_freed_memory
from longbert.utils.atomic import Terminated, guarded_stdout
from longbert.utils.logs import check_environment, set_verbosity


def run_command(action: Callable[[], object]) -> object:
    """Run a command body; user errors become one line on stderr and a non-zero exit, without a traceback. A command
    stopped by Ctrl-C exits 130, one stopped by SIGTERM 143 (128 + the signal, as a shell reports it); Ctrl-C is
    ignored from then on, so that more presses while the process shuts down (its threads joined) print no traceback
    and do not change the exit status. A process of several (torchrun, `accelerate launch`) tears its process group
    down and leaves at once with that status (see `leave_after_process_group`)."""
    status = None  # the exit status, once known; an unexpected error keeps None and prints its traceback
    try:
        result = _guarded(action)
        status = 0
        return result
    except typer.Exit as stop:
        status = stop.exit_code
        raise
    finally:
        if end_process_group() and status is not None:
            leave_after_process_group(status)


def _guarded(action: Callable[[], object]) -> object:
    try:
        with guarded_stdout():  # a failed write to stdout (a full disk) is one line, as a failed write to a file is
            return action()
    except TrainingInterrupted as error:
        ignore_ctrl_c()
        typer.echo(f"stopped: {error}", err=True)
        raise typer.Exit(128 + error.signum if error.signum == signal.SIGTERM else 130) from None
    except LongbertError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    except Terminated as error:
        ignore_ctrl_c()
        typer.echo("terminated", err=True)
        raise typer.Exit(128 + error.signum) from None
    except KeyboardInterrupt:
        ignore_ctrl_c()
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None


class OneLineUsageErrors(TyperGroup):
    """The `longbert` group, whose usage errors (an unknown option or command, a value of the wrong kind, a missing
    argument) are one line with the prefix of every other error, `error: ... (see 'longbert train --help')`, and exit
    2, where click would print the usage, a hint and "Error:" on four lines. No arguments at all still show the help."""

    def make_context(self, *args, **kwargs) -> typer.Context:
        with _usage_error_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: typer.Context) -> object:
        with _usage_error_in_one_line():
            return super().invoke(ctx)


# click's ClickException, by way of a class typer exports: typer 0.29 carries its own copy of click, older typers use
# click itself, and either way its usage errors derive from it.
_CLICK_ERROR = next(kind for kind in typer.BadParameter.__mro__ if kind.__name__ == "ClickException")


@contextlib.contextmanager
def _usage_error_in_one_line():
    try:
        yield
    except _CLICK_ERROR as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # `longbert` alone: the help, as click shows it
            raise
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        typer.echo(f"error: {error.format_message()}{hint}", err=True)
        raise typer.Exit(error.exit_code) from None


def end_process_group() -> bool:
    """Tear down the process group a command under torchrun or `accelerate launch` joined; whether there was one."""
    if "torch" not in sys.modules:  # a command that never imported torch joined no group
        return False
    import torch.distributed as dist  # noqa: PLC0415 (torch-free: `longbert --help` and start-up load no torch)

    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def leave_after_process_group(status: int) -> None:
    """Exit now with `status`, its output flushed, skipping the interpreter's teardown. gloo's worker threads outlive
    destroy_process_group (C++ still holds the group), and when the interpreter's exit destroys them unjoined, the
    process aborts ("terminate called without an active exception", exit -6) after all its work is done and
    written: about one two-process `predict` in fifteen on this 2-core CPU failed so, and failed CI once."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or full stdout was reported already; the status stands
            pass
    os._exit(status)


def ignore_ctrl_c() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def command_line() -> str:
    return shlex.join(["longbert", *sys.argv[1:]])


# Help as click shows it (rich_markup_mode=None: flags take no value, no markup is read from help texts), with the
# metavars click CLIs use: arguments by their name in capitals, options by the kind of value (typer would print the
# Python annotation: <path>, <list[str]>). One pass over every command, so a new option gets it too.
_METAVARS = {Path: "PATH", str: "TEXT", int: "INTEGER", float: "NUMBER"}


def classic_metavars(typer_app: typer.Typer) -> None:
    for command in typer_app.registered_commands:
        hints = typing.get_type_hints(command.callback)
        for name, parameter in inspect.signature(command.callback).parameters.items():
            info, kind = parameter.default, hints.get(name)
            kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)  # Optional[X], List[X]
            if getattr(info, "metavar", "set") is not None or kind is bool:
                continue
            if isinstance(info, ArgumentInfo):
                info.metavar = name.upper()
            elif isinstance(info, OptionInfo):
                info.metavar = _METAVARS.get(kind, "VALUE")


def start_up(quiet: bool, verbose: bool) -> None:
    """What every command does first: the verbosity from --quiet/--verbose (one error line, exit 2, for both or
    for a bad LONGBERT_VERBOSITY), and freed memory kept for reuse."""
    if quiet and verbose:
        typer.echo("error: --quiet and --verbose contradict each other: give one", err=True)
        raise typer.Exit(2)
    try:
        check_environment()
    except LongbertError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if quiet or verbose:
        set_verbosity("warning" if quiet else "debug")
    keep_freed_memory()  # large activations reused rather than mapped fresh per pass (faster on the CPU)


# The inference precisions (longbert.utils.hardware.INFERENCE_PRECISIONS, not imported here: it loads torch).
PRECISION_HELP = ("auto (bf16 where the device runs it fast, else fp32), fp32, bf16, or int8 (the backbone's Linear "
                  "layers dynamically quantized, close calls read again in fp32: CPU only, measured by `longbert "
                  "quantize`)")

# Options of the commands that answer with a model (predict, serve; evaluate and export take the first).
RUNTIME = typer.Option("torch", "--runtime", help="torch, or openvino: the backbone's passes in OpenVINO on the CPU "
                       "(window strategies; fp32, bf16 or auto; pip install 'longbert[openvino]')")
CALIBRATION = typer.Option(True, "--calibration/--no-calibration", help="the model's calibration (temperatures fitted "
                           "on validation) on, or off: the probabilities its logits give")
MIN_CONFIDENCE = typer.Option(None, "--min-confidence", metavar="P", help="abstain below confidence P in (0, 1) (the "
                              "top probability; multi-label: the least sure label's max(p, 1-p)): no label given")

# What predict and embed read (longbert.inference.predict.read_documents).
INPUT_HELP = ("a .txt file (one text per line) or - for stdin lines; a csv, jsonl, jsonl.gz, json or parquet file; a "
              "save_to_disk folder; or a hub dataset id")
