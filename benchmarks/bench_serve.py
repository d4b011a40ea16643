"""`longbert serve` under load on loopback: requests per second and p50/p99 latency for 1, 8 and 32 concurrent
clients, at each precision asked for. Each client sends one review per request (POST /predict {"text": ...}), the
next as soon as the answer arrives; the server batches what arrives together (`--max-batch`).

    python benchmarks/bench_serve.py runs/compare/compare_imdb/chunk      # benchmarks/results/serve.json
    python benchmarks/bench_serve.py RUN --precisions fp32,int8 --clients 1,8,32 --requests 96

The reviews: IMDb's test reviews in file order (every length, as a service would see them), the same for every
setting. The server runs in its own process (`longbert serve`, torch with its default threads); the clients are
threads of this process, on the same 2-core machine: they take some CPU from the server, as they would on one host.
A warm-up of 8 requests precedes each setting and is not counted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def reviews(count: int) -> list[str]:
    from longbert.data.sources import resolve_data_path

    texts = []
    with gzip.open(Path(resolve_data_path("imdb")) / "test.jsonl.gz", "rt") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if len(texts) == count:
                break
    return texts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, text: str) -> float:
    """One request; its latency in seconds (an HTTP error raises)."""
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as answer:
        answer.read()
    return time.perf_counter() - started


def load(url: str, texts: list[str], clients: int, requests: int) -> dict:
    """`requests` requests spread over `clients` threads; throughput and latency percentiles."""
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client():
        for i in counter:  # shared: each request is taken once
            seconds = post(url, texts[i % len(texts)])
            with lock:
                latencies.append(seconds)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"clients": clients, "requests": len(ordered), "seconds": wall, "requests_per_second": len(ordered) / wall,
            "p50_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]}


def serve_and_measure(model: str, precision: str, clients: list[int], requests: int, texts: list[str],
                      max_batch: int) -> list[dict]:
    port = free_port()
    command = [sys.executable, "-m", "longbert.cli", "serve", model, "--port", str(port), "--precision", precision,
               "--max-batch", str(max_batch)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"`{' '.join(command)}` exited with {server.returncode}") from None
                time.sleep(0.5)
        rows = []
        for n in clients:
            load(url + "/predict", texts, min(n, 8), 8)  # warm-up
            rows.append({"precision": precision, **load(url + "/predict", texts, n, max(requests, n))})
            print(f"{precision:<5} {n:>3} clients: {rows[-1]['requests_per_second']:6.2f} requests/s, "
                  f"p50 {rows[-1]['p50_ms']:7.0f} ms, p99 {rows[-1]['p99_ms']:7.0f} ms", flush=True)
        return rows
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    from longbert.utils.hardware import describe_machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a run folder or a saved model folder")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests", type=int, default=96, help="requests per setting (at least one per client)")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("-o", "--output", type=Path, default=RESULTS / "serve.json")
    args = parser.parse_args()
    texts = reviews(256)
    clients = [int(c) for c in args.clients.split(",")]
    rows = []
    for precision in args.precisions.split(","):
        rows += serve_and_measure(args.model, precision, clients, args.requests, texts, args.max_batch)
    result = {"command": " ".join(["python", "benchmarks/bench_serve.py", *sys.argv[1:]]),
              "machine": describe_machine(), "model": args.model, "max_batch": args.max_batch,
              "texts": "IMDb test reviews in file order, one per request", "rows": rows}
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
