"""Writing folders and files so that they appear complete or not at all (nothing half-written on a crash or Ctrl-C),
and putting right what a killed write left behind.

Beside a target `name`, a write in progress leaves at most:
    .name.staging-XXXXXXXX    the new folder being written (atomic_folder)
    .name.old-PID             the folder it replaces, between the swap's two renames and its removal
    .name.tmp                 a file being written (write_text_atomically, atomic_stream)
`recover(parent)` restores or removes them; call it while no other process writes into `parent`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

_LEFTOVER = re.compile(r"^\.(?P<target>.+)\.(?:(?P<old>old-\d+)|staging-\w+|tmp)$")


@contextmanager
def atomic_folder(target: str | Path) -> Iterator[Path]:
    """Yield a staging folder beside `target`. When the block finishes, the staging folder replaces `target` whole
    (an older folder of that name is swapped out, then removed); when it fails, the staging folder is removed and
    `target` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the finished folder should read like any other
    try:
        yield staging
        # The swap: two renames. A kill between them leaves only the old folder, which `recover` puts back.
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


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    """Write a file through a temporary sibling and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write a text file (UTF-8) through a temporary sibling and a rename."""
    write_bytes_atomically(path, text.encode("utf-8"))


@contextmanager
def atomic_stream(path: str | Path) -> Iterator[TextIO]:
    """A text file (UTF-8) written progressively: the block writes into a temporary sibling (.name.tmp), which is
    renamed to `path` when the block finishes and removed when it fails, so `path` never holds a half-written file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as stream:
            yield stream
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def recover(parent: str | Path) -> list[str]:
    """Put right what killed writes left in `parent`: a folder swapped out whose replacement never arrived is put
    back; staging folders, swapped-out folders and temporary files are removed. Returns one line per thing done."""
    parent = Path(parent)
    done = []
    for path in sorted(parent.iterdir()):
        match = _LEFTOVER.match(path.name)
        if match is None:
            continue
        target = parent / match["target"]
        if match["old"] and not target.exists():
            os.replace(path, target)
            done.append(f"restored {target.name} (a swap was interrupted)")
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            done.append(f"removed {path.name} (left by an interrupted write)")
        else:
            path.unlink()
            done.append(f"removed {path.name} (left by an interrupted write)")
    return done
