"""Progress bars (rich) for every long step. LONGBERT_PROGRESS=0 turns them off."""

from __future__ import annotations

import os
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def enabled() -> bool:
    return os.environ.get("LONGBERT_PROGRESS", "1") != "0"


def progress(iterable: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a rich progress bar (elapsed and remaining time) on stderr."""
    if not enabled():
        yield from iterable
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in iterable:
            yield item
            bar.advance(task)
