"""The training log both loops keep: every `train.log_every_steps` optimiser steps, one entry with the mean training
loss of the batches since the last entry, the learning rates now, and the document tokens trained on per second."""

from __future__ import annotations

import time

import torch

from longbert.training.checkpoint import LoopState


def close_log_window(state: LoopState, accelerator, scheduler, started: float, counts_tokens: bool = True,
                     **fields) -> dict:
    """Close the log's window at `state.global_step`: an entry {step, **fields, loss, learning_rate (the first
    parameter group's: the backbone's where it trains), head_learning_rate (the last group's), tokens_per_second
    (None without `counts_tokens`: frozen mode's cached batches have no tokens)}, summed over all processes, appended
    to state.train_log and sent to the tracker; the window's counters start again. `started`: the perf_counter time
    the training started at, less the seconds trained before a resume. Time spent evaluating (added to
    state.logged_seconds by the loop) does not count towards tokens per second."""
    totals = accelerator.reduce(torch.tensor([state.loss_sum, state.loss_batches, state.tokens], dtype=torch.float64,
                                             device=accelerator.device), "sum").tolist()
    state.train_seconds = time.perf_counter() - started
    seconds = state.train_seconds - state.logged_seconds
    rates = scheduler.get_last_lr()
    entry = {"step": state.global_step, **fields, "loss": totals[0] / max(totals[1], 1), "learning_rate": rates[0],
             "head_learning_rate": rates[-1],
             "tokens_per_second": totals[2] / seconds if counts_tokens and seconds > 0 else None}
    state.train_log.append(entry)
    state.loss_sum, state.loss_batches, state.tokens = 0.0, 0, 0
    state.logged_seconds = state.train_seconds
    accelerator.log({f"train/{k}": v for k, v in entry.items() if k != "step" and v is not None},
                    step=state.global_step)
    return entry


def speed(entry: dict) -> str:
    """', 1234 tokens/s' for a log entry that measured it, else ''."""
    return "" if entry["tokens_per_second"] is None else f", {entry['tokens_per_second']:.0f} tokens/s"
