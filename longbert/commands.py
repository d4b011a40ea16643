"""How every `longbert` command runs (`run_command`): a user error is one line on stderr and exit 2, a command stopped
by Ctrl-C exits 130 and by SIGTERM 143, and a process group joined under torchrun is torn down; and how its help
reads (`classic_metavars`)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

import typer

from longbert.errors import LongbertError


def run_command(action: Callable[[], object]) -> object:
    """Run a command body; user errors become one line on stderr and a non-zero exit, without a traceback. A command
    stopped by Ctrl-C exits 130, one stopped by SIGTERM 143 (128 + the signal, as a shell reports it); Ctrl-C is
    ignored from then on, so that more presses while the process shuts down (its threads joined) print no traceback
    and do not change the exit status."""
    from longbert.training.stopping import TrainingInterrupted
    from longbert.utils.atomic import Terminated, guarded_stdout

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
    finally:
        end_process_group()


def end_process_group() -> None:
    """Tear down the process group a command under torchrun or `accelerate launch` joined. Left to the interpreter's
    exit, gloo's threads can abort a process as it ends ("terminate called without an active exception": a torchrun
    of two predicting processes failed so, once, after both had finished their work)."""
    import sys

    if "torch" not in sys.modules:  # a command that never imported torch joined no group
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def ignore_ctrl_c() -> None:
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def command_line() -> str:
    import shlex

    return shlex.join(["longbert", *sys.argv[1:]])


# Help as click shows it (rich_markup_mode=None: flags take no value, no markup is read from help texts), with the
# metavars click CLIs use: arguments by their name in capitals, options by the kind of value (typer would print the
# Python annotation: <path>, <list[str]>). One pass over every command, so a new option gets it too.
_METAVARS = {Path: "PATH", str: "TEXT", int: "INTEGER", float: "NUMBER"}


def classic_metavars(typer_app: typer.Typer) -> None:
    import inspect
    import typing

    from typer.models import ArgumentInfo, OptionInfo

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
