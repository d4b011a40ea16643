"""Writing folders and files so that they appear complete or not at all (nothing half-written on a crash or Ctrl-C)."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_folder(target: str | Path) -> Iterator[Path]:
    """Yield a staging folder beside `target`. When the block finishes, the staging folder replaces `target` whole
    (an older folder of that name is swapped out, then removed); when it fails, the staging folder is removed and
    `target` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the finished folder should read like any other
    try:
        yield staging
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write a file through a temporary sibling and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
