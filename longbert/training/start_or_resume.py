"""Run folders: one process writes a run folder at a time, and what a killed run left there is put right before the
next one starts.

    with locked(run_dir):                      # a second process asking for the folder gets a LongbertError at once
        resume = prepare(run_dir, recipe, resume)   # tidy the folder, then: continue the checkpoint, or start

Both loops open their folder through `open_run`, which does this on the main process and tells the others.
"""

from __future__ import annotations

import fnmatch
import shutil
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from accelerate.utils import broadcast_object_list

from longbert.config import recipe_differences, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.training.checkpoint import is_finished, read_fingerprint, read_processes, recipe_fingerprint
from longbert.training.stopping import StopRequest, stop_on_signals
from longbert.utils.atomic import write_text_atomically
from longbert.utils.destinations import locked
from longbert.utils.folders import (
    CHECKPOINT,
    METRICS_FILE,
    RECIPE_FILE,
    RUN_ENTRIES,
    SPLIT_FILE,
)
from longbert.utils.hardware import process_state
from longbert.utils.logs import get_logger
from longbert.utils.outputs import recover

# What a run writes into its folder; a folder holding anything else is not cleared to start a run again.


@contextmanager
def open_run(run_dir: Path, recipe, resume: bool, stop: StopRequest) -> Iterator[bool]:
    """Open `run_dir` for a run of `recipe`: the main process holds its lock (`locked`) and decides how the run starts
    (`prepare`), every process learns that decision, which the block receives (True: continue the checkpoint). While
    the block runs, Ctrl-C and SIGTERM set `stop` (`stop_on_signals`)."""
    if resume and not run_dir.exists():
        raise LongbertError(f"--resume: {run_dir} has no checkpoint to continue from (the folder does not exist)")
    process = process_state()  # which process this is (`accelerate launch` starts one per device)
    # The main process makes and checks the folder first: an output_dir that cannot be one is one line, before any work.
    with locked(run_dir, "output_dir") if process.is_main_process else nullcontext(), stop_on_signals(stop):
        decision = [prepare(run_dir, recipe, resume, process.num_processes) if process.is_main_process else None]
        if process.num_processes > 1:
            broadcast_object_list(decision)
        yield decision[0]


def prepare(run_dir: Path, recipe, resume: bool, processes: int = 1) -> bool:
    """Call under `locked(run_dir)`. Finish or remove what killed writes left (see `atomic.recover`), then decide:
    True -> continue from the folder's checkpoint (`resume`, same recipe, as many processes: `processes`); False ->
    train from the beginning (a new folder, or one whose run stopped before its first checkpoint: it is cleared).
    Raises LongbertError when the folder holds another run, a run to resume without --resume, a run trained by
    another number of processes, or files that no run wrote."""
    for line in recover(run_dir):
        get_logger(__name__).info(f"{run_dir}: {line}")
    saved = run_dir / RECIPE_FILE
    same_recipe = saved.is_file() and saved.read_text() == recipe_to_yaml(recipe)
    has_checkpoint = is_finished(run_dir / CHECKPOINT)
    if resume:
        if saved.is_file() and not same_recipe:
            raise LongbertError(f"--resume: the recipe differs from the one {run_dir} was started with ({saved}: "
                                f"{recipe_differences(saved, recipe)}); resume with the same recipe and overrides")
        if has_checkpoint:
            if read_fingerprint(run_dir / CHECKPOINT) != recipe_fingerprint(recipe):
                raise LongbertError(f"--resume: the checkpoint in {run_dir / CHECKPOINT} was written by another "
                                    f"recipe than this one; resume with the recipe that started it")
            check_processes(run_dir, read_processes(run_dir / CHECKPOINT), processes)
            return True
        if not same_recipe:
            raise LongbertError(f"--resume: {run_dir} has no checkpoint to continue from (no run was started there)")
        _clear(run_dir)
        get_logger(__name__).info(f"--resume: {run_dir} has no checkpoint to continue from (its run stopped before the "
                                  "first one); training from the beginning")
        return False
    if has_checkpoint or (run_dir / METRICS_FILE).exists():
        raise LongbertError(f"run folder {run_dir} already holds a run; pass --resume to continue it, or set another "
                            "output_dir (--set output_dir=...)")
    if _clear(run_dir):
        get_logger(__name__).info(f"{run_dir} holds a run that stopped before its first checkpoint; training it again")
    return False


def write_recipe(run_dir: Path, recipe, file_split=None) -> None:
    """The resolved recipe (recipe.yaml) and, for documents from one data file, how the file was cut into the splits
    (data-split.json, a longbert.data.carving.FileSplit), so that the same cut can be checked and made again."""
    write_text_atomically(run_dir / RECIPE_FILE, recipe_to_yaml(recipe))
    if file_split is not None:
        write_text_atomically(run_dir / SPLIT_FILE, file_split.to_json())


def check_processes(run_dir: Path, saved: int | None, processes: int) -> None:
    """Refuse to resume with another number of processes than the run's checkpoint was written by (`saved`; None: a
    checkpoint that did not record it). Why not continue: the steps per epoch, the learning-rate schedule (kept in
    per-process units) and which documents each process reads are laid out for the number of processes, so the run
    would silently continue another schedule over other batches."""
    if saved is None or saved == processes:
        return
    count = lambda n: f"{n} process" + ("es" if n != 1 else "")
    how = ("without torchrun or accelerate launch" if saved == 1 else
           f"with the same number (torchrun --nproc_per_node {saved}, or accelerate launch --num_processes {saved})")
    raise LongbertError(f"--resume: the run in {run_dir} was trained by {count(saved)} and this start has "
                        f"{count(processes)}; its learning-rate schedule and batches are laid out for {count(saved)}, "
                        f"so resume it {how}")


def _clear(run_dir: Path) -> bool:
    """Remove what a run wrote into `run_dir` (refusing when anything else is there). Returns whether it held any."""
    entries = sorted(run_dir.iterdir())
    foreign = [p.name for p in entries if not any(fnmatch.fnmatch(p.name, pattern) for pattern in RUN_ENTRIES)]
    if foreign:
        raise LongbertError(f"run folder {run_dir} holds files that no longbert run wrote ({', '.join(foreign[:3])}); "
                            "set another output_dir (--set output_dir=...)")
    for path in entries:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return bool(entries)
