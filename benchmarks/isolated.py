"""Helpers shared by the benchmarks that run every configuration in a fresh process, so that each configuration's
peak resident memory is its own (bench_bigbird.py, bench_recurrence.py, bench_scaling.py, bench_training.py), and by
those that can mask AVX-512 to emulate an AVX2-only CPU (bench_belt.py, profile_inference.py). Imported as
`isolated` from the scripts, which run with this folder on sys.path."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable


def rss_mb() -> float | None:
    """The process's resident memory now, in MB (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def measure_forwards(forward: Callable[[], object], repeats: int, tokens: int) -> tuple[dict, object]:
    """Run `forward` once under longbert.utils.hardware.measure (peak memory of the first forward), then `repeats` more
    times for the time (median). Returns (measurements, the first forward's result)."""
    from longbert.utils.hardware import measure

    before = rss_mb()
    with measure("cpu") as first:
        result = forward()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times) if times else first["seconds"]
    peak = first["peak_memory_mb"]
    return {
        "seconds": round(seconds, 4),
        "us_per_token": round(seconds / tokens * 1e6, 1),
        "first_forward_seconds": round(first["seconds"], 4),
        "peak_memory_mb": peak,
        "model_memory_mb": before,
        "forward_memory_mb": None if peak is None or before is None else round(peak - before, 1),
        "memory_kind": first["memory_kind"],
    }, result


# --emulate-avx2: the variables that limit ATen's, oneDNN's, MKL's and FBGEMM's kernels to AVX2 (each library reads
# its own at load time, so they must be set before the process starts). FBGEMM runs torch's int8 Linear layers: without
# its variable they keep AVX-512 VNNI (int8 over fp32 on 2,000 IMDb reviews, bench_int8_agreement.py: 2.41x with FBGEMM
# unmasked, 1.46x masked). onnxruntime's MLAS has no such switch.
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


def rerun_with_avx2(script: str, output) -> None:
    """For a script given --emulate-avx2: run `script` again, with its arguments and `-o output`, in a child process
    with AVX2_ENV set, and exit with the child's status. In that child (AVX2_ENV already set) it returns at once."""
    if os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        return
    child = [a for a in sys.argv[1:] if a != "--emulate-avx2"]
    sys.exit(subprocess.call([sys.executable, script, *child, "--emulate-avx2", "-o", str(output)],
                             env={**os.environ, **AVX2_ENV}))


def auto_precision() -> str:
    """What `mixed_precision: auto` runs on this CPU: bf16 where it is fast, else fp32."""
    from longbert.utils.hardware import describe_machine

    return describe_machine()["auto_precision_cpu"]


def error_text(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


def run_isolated(script: str, args: list[str], timeout: float) -> dict:
    """Run `script` with `args` in a fresh Python process; its last stdout line starting with '{' is the result."""
    command = [sys.executable, str(Path(script).resolve()), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit code {done.returncode} (killed for memory?): {tail[:300]}"}
    return json.loads(lines[-1])


def run_each(script: str, specs: list[dict], timeout: float, keys: list[str],
             status: Callable[[dict], str]) -> list[dict]:
    """Run every configuration of `script` in a fresh process (`script --one SPEC`), printing a line as each ends: its
    `keys` and `status(result)`, or its error. Returns each spec merged with its result."""
    results = []
    for spec in specs:
        result = {**spec, **run_isolated(script, ["--one", json.dumps(spec)], timeout)}
        results.append(result)
        name = " ".join(str(spec[key]) for key in keys)
        print(f"  {name}: {result.get('error') or status(result)}", flush=True)
    return results


def find(results: list[dict], system: str, precision: str, tokens: int) -> dict | None:
    """The successful result of one configuration, or None."""
    for r in results:
        if (r["system"], r["precision"], r["tokens"]) == (system, precision, tokens) and "error" not in r:
            return r
    return None


def table_printer(columns: list[tuple[str, str, str]], keys: int) -> Callable[[list[dict]], None]:
    """A printer of result rows as a fixed-width table. `columns` are (header, result field, format spec such as
    '>9.3f'); the first `keys` of them name the configuration, and are all that a failed one prints before its error."""

    def width(spec: str) -> str:  # the alignment and width of a spec: '>9.3f' -> '>9'
        return re.match(r"[<>^]?\d*", spec).group(0)

    def cell(row: dict, field: str, spec: str) -> str:
        value = row.get(field)
        return format("-", width(spec)) if value is None else format(value, spec)

    def print_table(results: list[dict]) -> None:
        header = " ".join(format(title, width(spec)) for title, _, spec in columns)
        print(header)
        print("-" * len(header))
        for row in results:
            shown = columns[:keys] if "error" in row else columns
            line = " ".join(cell(row, field, spec) for _, field, spec in shown)
            print(f"{line}  fails: {row['error'][:70]}" if "error" in row else line)

    return print_table


def write_results(output: Path, report: dict, table: Callable[[list[dict]], None]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print()
    table(report["results"])
    print()
    print(json.dumps(report["summary"], indent=2))
    print(f"\nwrote {output}")
