"""Writing folders and files so that they appear complete or not at all (nothing half-written on a crash or Ctrl-C),
and putting right what a killed write left behind.

Beside a target `name`, a write in progress leaves at most:
    .name.staging-PID-XXXX    the new folder being written (atomic_folder)
    .name.old-PID             the folder it replaces, between the swap's two renames and its removal (what in it the
                              command did not write is moved back into the new folder first: `swap_in`)
    .name.tmp-PID-XXXX        a file being written (write_text_atomically, atomic_stream)
Each temporary name is unique to its writer (two processes writing the same target never share one) and carries
the writer's process id, so that the next write of the same target removes what a killed writer left (`sweep`).
Folders are written by longbert.utils.outputs (`atomic_folder`), which uses these names; its `recover(parent)` restores
or removes everything left in a folder.

A target that is not a regular file (a FIFO, a device such as /dev/null, a terminal) is written straight through,
since renaming over it would replace the node its reader is waiting on; a symbolic link is followed, so the file
it points to is replaced and the link stays. Files are created with the mode the umask implies (safetensors and
mkstemp make them private), so a model folder trained by one user can be read by another.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, Iterator, TextIO

from longbert.errors import LongbertError

LEFTOVER = re.compile(
    r"^\.(?P<target>.+)\.(?:(?P<old>old-\d+)|staging-(?P<spid>\d+-)?\w+|tmp(?:-(?P<tpid>\d+)-\w+)?)$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def public_mode(path: Path) -> None:
    """Give a file (or a folder) the mode a plain `open` (or `mkdir`) would have given it under the umask."""
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~_umask())


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(target: Path) -> list[str]:
    """Remove the staging folders and temporary files that killed writers of `target` left beside it (those whose
    process is gone); a live writer's are kept. Returns one line per thing removed."""
    done = []
    if not target.parent.is_dir():
        return done
    for path in target.parent.iterdir():
        match = LEFTOVER.match(path.name)
        if match is None or match["target"] != target.name or match["old"]:
            continue
        pid = match["spid"] or match["tpid"]
        if pid is None or process_alive(int(pid.rstrip("-"))):
            continue
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink(True)
        done.append(f"removed {path.name} (left by a killed write)")
    return done


def live_writer(target: Path) -> int | None:
    """The process id of another live process now writing `target` (its temporary file lies beside it), or None."""
    if not target.parent.is_dir():
        return None
    for path in target.parent.iterdir():
        match = LEFTOVER.match(path.name)
        pid = match and match["target"] == target.name and match["tpid"]
        if pid and int(pid) != os.getpid() and process_alive(int(pid)):
            return int(pid)
    return None


def disk_error(error: OSError, path: Path | str) -> LongbertError:
    """One line for an OSError met while writing `path` (a full disk, a read-only or vanished place; `path` may be
    a name such as 'stdout')."""
    reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
    return LongbertError(f"could not write {path}: {reason}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as a KeyboardInterrupt so that every cleanup written for Ctrl-C runs for it too; a command
    still ends with SIGTERM's exit status (128 + 15), not Ctrl-C's."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"signal {signum}")
        self.signum = int(signum)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises Terminated, a KeyboardInterrupt (in the main thread), instead of ending
    the process at once, so that the cleanup of an interrupted write runs as it does for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def os_error_of(error: BaseException) -> OSError | None:
    """The OSError behind `error`: itself, or the one a safetensors SafetensorError wraps (it reports a failed write
    as 'Error while serializing: I/O error: No space left on device (os error 28)'); None for anything else."""
    if isinstance(error, OSError):
        return error
    if type(error).__name__ == "SafetensorError":
        found = re.search(r"\(os error (\d+)\)|\bOs \{ code: (\d+)", str(error))  # safetensors >= 0.5 | older
        if found:
            code = int(found[1] or found[2])
            return OSError(code, os.strerror(code))
    return None


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    """Write a file through a temporary sibling and a rename (straight through a FIFO or device; a symlink's
    target is the file replaced)."""
    with _atomic_handle(path, "wb") as stream:
        stream.write(data)


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write a text file (UTF-8) through a temporary sibling and a rename."""
    write_bytes_atomically(path, text.encode("utf-8"))


@contextmanager
def atomic_stream(path: str | Path) -> Iterator[TextIO]:
    """A text file (UTF-8) written progressively: the block writes into a temporary sibling (.name.tmp-PID-XXXX),
    which is renamed to `path` when the block finishes and removed when it fails or the process is asked to stop
    (Ctrl-C, SIGTERM), so `path` never holds a half-written file."""
    with terminate_as_interrupt(), _atomic_handle(path, "w") as stream:
        yield stream


@contextmanager
def atomic_binary_stream(path: str | Path) -> Iterator[BinaryIO]:
    """`atomic_stream` for bytes: written progressively into a temporary sibling, renamed to `path` when the block
    finishes, removed when it fails or the process is asked to stop."""
    with terminate_as_interrupt(), _atomic_handle(path, "wb") as stream:
        yield stream


class _Guarded:
    """A stream whose write errors (a full disk, a vanished place) become one LongbertError line naming the file;
    errors of the block's own work pass through unchanged."""

    def __init__(self, stream, path: Path | str):
        self._stream, self._path = stream, path
        self.failed = False  # whether a write or flush failed

    def write(self, data):
        try:
            return self._stream.write(data)
        except OSError as error:
            self.failed = True
            raise disk_error(error, self._path) from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as error:
            self.failed = True
            raise disk_error(error, self._path) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """While the block runs, a failed write to sys.stdout (a full disk, a closed pipe) is one LongbertError line
    naming stdout, as a failed write to a file is; what is still buffered is flushed before the block ends, so that
    its failure is that line too. After a failure the rest is dropped (stdout's descriptor is pointed at /dev/null),
    so that the interpreter's own flush at exit adds no second message."""
    stdout = sys.stdout
    sys.stdout = guarded = _Guarded(stdout, "stdout")
    try:
        yield
        guarded.flush()
    finally:
        sys.stdout = stdout
        if guarded.failed:
            _drop_stdout(stdout)


def _drop_stdout(stdout) -> None:
    with suppress(OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's) has nothing to drop
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout.fileno())
        os.close(null)


@contextmanager
def _closing(stream, path: Path):
    """Yield `stream` guarded; flush and close it when the block ends. When the block fails, closing cannot replace
    its error: a buffer that cannot be flushed then (a full disk) is dropped quietly."""
    guarded = _Guarded(stream, path)
    try:
        yield guarded
        guarded.flush()
    except BaseException:
        with suppress(OSError):
            stream.close()
        raise
    try:
        stream.close()
    except OSError as error:
        raise disk_error(error, path) from None


@contextmanager
def _atomic_handle(path: str | Path, mode: str):
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    encoding = None if "b" in mode else "utf-8"
    if path.exists() and not stat.S_ISREG(path.stat().st_mode) and not path.is_dir():
        try:
            stream = open(path, mode, encoding=encoding)
        except OSError as error:
            raise disk_error(error, path) from None
        with _closing(stream, path) as guarded:
            yield guarded
        return
    sweep(path)
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    except OSError as error:
        raise disk_error(error, path) from None
    tmp = Path(name)
    try:
        with _closing(os.fdopen(handle, mode, encoding=encoding), path) as guarded:
            yield guarded
        public_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data) -> None:
    """`data` as indented JSON at `path`, atomically; nan or inf anywhere in it is refused (`json_text`) and nothing
    is written."""
    write_text_atomically(path, json_text(data, path, indent=2))


def json_text(data, where: str | Path, **options) -> str:
    """`data` as JSON text (json.dumps with `options`), never holding NaN or Infinity, which are not JSON (a strict
    reader refuses the file) and mean a number was lost: one LongbertError naming `where` and the key that holds one."""
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError as error:
        found = _non_finite(data)
        if found is None:
            raise
        raise LongbertError(f"{where}: {found[0] or 'the value'} is {found[1]}, not a finite number; it was not "
                            "written") from error


def _non_finite(data, path: str = "") -> tuple[str, float] | None:
    """(the dotted path of the first nan or inf in `data`, that value), or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return path, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None
