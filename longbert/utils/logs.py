"""longbert's status messages ("data: ...", "step 63: validation ...", "compare: ...") through `logging`, on stderr,
so that stdout carries only what a command gives (predictions, tables) and can be piped.

    LONGBERT_VERBOSITY=warning longbert train ...    # or: longbert --quiet train ...; --verbose for debug
    longbert.set_verbosity("warning")                # from Python (as transformers' set_verbosity)

Levels: debug, info (the default: every status line), warning (only what may need action), error. Every module
logs under the `longbert` logger, which has a handler of its own and does not propagate to the root logger unless
`logging.getLogger("longbert").propagate = True`. Progress bars are not log records (LONGBERT_PROGRESS=0 turns them
off). Where several processes train together, the training loops log on the main process only."""

from __future__ import annotations

import logging
import os
import sys

from longbert.errors import LongbertError

ROOT = "longbert"
ENVIRONMENT = "LONGBERT_VERBOSITY"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class StderrHandler(logging.Handler):
    """Each record as one plain line on the sys.stderr of the moment (so that redirection and test capture see it).
    A failed write raises, as print's does, instead of logging's report of its own error."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")
        sys.stderr.flush()


def level_named(name: str, where: str) -> int:
    """The logging level of a verbosity name; anything else is one LongbertError line naming `where` it came from."""
    level = LEVELS.get(str(name).strip().lower())
    if level is None:
        raise LongbertError(f"{where} must be one of {', '.join(LEVELS)}, got {name!r}")
    return level


def root_logger() -> logging.Logger:
    """The `longbert` logger, given its handler and the level LONGBERT_VERBOSITY names (info when unset) the first
    time. An unknown name there leaves info and says so once (the command line refuses it: `check_environment`)."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        logger.addHandler(StderrHandler())
        logger.propagate = False
        try:
            logger.setLevel(level_named(os.environ.get(ENVIRONMENT, "info"), ENVIRONMENT))
        except LongbertError as error:
            logger.setLevel(logging.INFO)
            logger.warning(f"{error}; showing info")
    return logger


def check_environment() -> None:
    """Refuse an unknown LONGBERT_VERBOSITY in one LongbertError line (what the command line does first)."""
    if ENVIRONMENT in os.environ:
        level_named(os.environ[ENVIRONMENT], ENVIRONMENT)


def get_logger(name: str) -> logging.Logger:
    """The logger of module `name` (a child of `longbert`, which is set up first)."""
    root_logger()
    return logging.getLogger(name)


class MainProcessLogger(logging.LoggerAdapter):
    """A logger that logs on the main process only (accelerate's process state), without the '[RANK 0]' prefix
    accelerate's own adapter puts on every line."""

    def log(self, level, msg, *args, **kwargs):
        from accelerate import PartialState  # noqa: PLC0415 (torch-free: the CLI's start-up imports this module)

        if PartialState().is_main_process:
            self.logger.log(level, msg, *args, **kwargs)


def main_process_logger(name: str) -> MainProcessLogger:
    """The logger of a training module: it logs on the main process only."""
    root_logger()
    return MainProcessLogger(logging.getLogger(name), {})


def set_verbosity(level: str | int) -> None:
    """Show longbert's messages at `level` and above: a name (debug, info, warning, error) or a logging level."""
    root_logger().setLevel(level if isinstance(level, int) else level_named(level, "verbosity"))


def get_verbosity() -> int:
    """The level of longbert's messages now (a logging level: logging.INFO by default)."""
    return root_logger().level
