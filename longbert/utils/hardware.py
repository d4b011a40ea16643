"""What the machine is and what it does fast: bf16 support, the process group and device (accelerate), peak-memory
measurement, a one-line description."""

from __future__ import annotations

import gc
import os
import platform
import time
from contextlib import contextmanager

import torch
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env

from longbert.errors import LongbertError
from longbert.utils.allocator import trim_heap


def fast_bf16(device: torch.device | str) -> bool:
    """True where bf16 autocast is the faster choice: GPUs with bf16 support, CPUs with AVX512-BF16 or AMX whose
    AVX-512 kernels torch dispatches to (measured on this project's 2-core AVX512-BF16 CPU: about 2x faster than fp32
    for MiniLM). With ATEN_CPU_CAPABILITY=avx2 set, such a CPU counts as the AVX2 CPU torch then runs it as."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
            return False  # torch dispatches to AVX2 (or older) kernels here: bf16 would run emulated, slowly
        check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
        amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
        return bool((check and check()) or (amx and amx()))
    return False


def resolve_precision(requested: str, device: torch.device | str) -> str:
    """`auto` -> bf16 where it is fast, else no; explicit choices pass through."""
    if requested != "auto":
        return requested
    return "bf16" if fast_bf16(device) else "no"


def adamw(groups: list[dict]) -> torch.optim.AdamW:
    """AdamW over parameter `groups`, in its fused form (one kernel over all tensors, CPU and CUDA): the same update
    as the default per-tensor loop, a little faster (MiniLM, batches of 16 IMDb reviews on the 2-core CPU: 2.47 s a
    step instead of 2.54; benchmarks/bench_training.py)."""
    return torch.optim.AdamW(groups, fused=True)


# What `predict --precision` and `model.predict(precision=)` take. auto stays exact (bf16 where the device runs it
# fast, else fp32); int8 is chosen by the user: the backbone's Linear layers dynamically quantized, on the CPU.
INFERENCE_PRECISIONS = ("auto", "fp32", "bf16", "int8")


def process_state():
    """accelerate's PartialState: which process this is, how many there are, and the device it runs on. Under
    torchrun or `accelerate launch` on a machine without an accelerator, the CPU processes form one group (gloo),
    as `accelerate launch --cpu` makes them; otherwise accelerate would leave each one alone, all of them main
    processes writing the same files."""
    cpu_group = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()
    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or cpu_group)


def check_precision(precision: str, name: str = "precision") -> None:
    """A LongbertError naming `name` (the option or argument) when `precision` is not an inference precision."""
    if precision not in INFERENCE_PRECISIONS:
        raise LongbertError(f"{name} must be one of {', '.join(INFERENCE_PRECISIONS)}, got {precision!r}")


def autocast_for(model: torch.nn.Module, precision: str = "auto"):
    """The autocast for inference on the model's device: `bf16` -> bf16 autocast; `fp32` -> a disabled autocast;
    `auto` -> bf16 where the device runs it fast (CPUs with AVX512-BF16/AMX, recent GPUs), fp32 elsewhere; `int8` ->
    a disabled autocast (what the quantized model does not run in int8 runs in fp32)."""
    check_precision(precision)
    device = next(model.parameters()).device
    if precision == "int8" and device.type != "cpu":
        raise LongbertError(f"precision int8 runs on the CPU only (dynamically quantized Linear layers); the model is "
                            f"on {device}: use bf16 or fp32 there")
    if precision == "bf16" or (precision == "auto" and fast_bf16(device)):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return torch.autocast(device.type, enabled=False)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe_machine() -> dict:
    info = {
        "cpu": cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the kernels torch dispatches to: AVX2, AVX512
        "cpu_bf16_fast": fast_bf16("cpu"),
        "auto_precision_cpu": "bf16" if fast_bf16("cpu") else "fp32",  # what precision auto runs on this CPU
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
    return info


def _rss_peak_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def release_freed_memory() -> None:
    """Hand memory that Python and the C allocator hold but no longer use back to the operating system (glibc's
    malloc_trim), so that a peak measured next counts what the measured block uses, not what earlier work (a training
    run, another strategy) left in the allocator's free lists."""
    gc.collect()
    trim_heap()


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Linux: reset the peak resident set size (VmHWM) to the current one
        return True
    except OSError:
        return False


@contextmanager
def measure(device: torch.device | str, memory: bool = True):
    """Time a block and its peak memory. Yields a dict filled on exit with seconds, peak_memory_mb and
    added_memory_mb (the peak less what was in use when the block started: what the block itself needed):
    CUDA -> torch's peak allocation; CPU (Linux) -> the process's peak resident set size during the block,
    measured after freed memory was handed back (`release_freed_memory`), so that what earlier work left behind does
    not count. With `memory=False` on the CPU the block is only timed (both memory fields None): handing freed
    memory back runs a full garbage collection, which costs a large process a noticeable fraction of a second."""
    device = torch.device(device)
    result: dict = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result["memory_kind"] = "cuda_max_allocated"
    elif memory:
        release_freed_memory()
        before = _rss_bytes()
        result["memory_kind"] = "process_peak_rss" if _reset_rss_peak() else "process_peak_rss_since_start"
    else:
        before, result["memory_kind"] = None, None
    start = time.perf_counter()
    try:
        yield result
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        else:
            peak = _rss_peak_bytes() if memory else None
        result["seconds"] = time.perf_counter() - start
        result["peak_memory_mb"] = None if peak is None else round(peak / 2**20, 1)
        result["added_memory_mb"] = None if peak is None or before is None else round(max(peak - before, 0) / 2**20, 1)


def release_memory() -> None:
    """Let one strategy's model and optimiser go before the next is built (peak memory is measured per run)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
