"""Progress bars (rich) for every long step. On a terminal: a live bar; in a log file or CI: a plain line every
30 seconds. LONGBERT_PROGRESS=0 turns them off."""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
LOG_EVERY_SECONDS = 30.0


def enabled() -> bool:
    return os.environ.get("LONGBERT_PROGRESS", "1") != "0"


def progress(iterable: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress display on stderr (elapsed and remaining time)."""
    if not enabled():
        yield from iterable
        return
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if not sys.stderr.isatty():
        yield from _logged(iterable, description, total)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in iterable:
            yield item
            bar.advance(task)


def _logged(iterable: Iterable[T], description: str, total: int | None) -> Iterator[T]:
    start = last = time.perf_counter()
    done = 0
    for item in iterable:
        yield item
        done += 1
        now = time.perf_counter()
        if now - last >= LOG_EVERY_SECONDS:
            last = now
            of = f"/{total}" if total else ""
            eta = f", about {(now - start) / done * (total - done):.0f}s left" if total else ""
            print(f"{description}: {done}{of} after {now - start:.0f}s{eta}", file=sys.stderr, flush=True)
