"""`longbert serve`: classify texts over HTTP (FastAPI on uvicorn) with a saved model, a run folder's kept model, or
an exported folder (onnxruntime, see exported.py). Concurrent requests are grouped into batches.

    GET  /health   -> {"status": "ok", "model", "backend": pytorch | onnx-fp32 | onnx-int8, "labels", "max_batch"}
    POST /predict  {"text": "..."}            -> one prediction: label (labels when multi-label), probabilities,
                                                 n_tokens
                   {"texts": ["...", ...]}    -> {"predictions": [one per text, in order]}
Bad requests are answered with 4xx and {"error": "one line"}: 400 when the body is not JSON, 422 when it does not
hold what /predict needs (no text, a text that is empty or not a string, an unknown field); an unknown route or
method gets 404 / 405 in the same form.

Batching: requests wait in one queue. A worker takes the first, then keeps taking more for up to `max_wait_ms`
or until `max_batch` texts are gathered, runs the model once on all of them in a thread (so the server keeps
accepting requests meanwhile), and hands each request its own rows. Under load the next batch gathers while the
current one runs.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations (Request) at run time.
import asyncio
import json
import socket
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable

from longbert.errors import LongbertError


class BadRequest(Exception):
    """A request /predict cannot answer: `status` (400 or 422) and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def parse_request(body: bytes) -> tuple[list[str], bool]:
    """The body of POST /predict -> (texts, whether it was one 'text'), or BadRequest saying what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadRequest(400, "the body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise BadRequest(400, f"the body is not valid JSON ({error.msg}, {where})") from None
    expected = 'the body must be a JSON object with "text" (a string) or "texts" (a list of strings)'
    if not isinstance(payload, dict):
        raise BadRequest(422, f"{expected}, got {_kind(payload)}")
    unknown = sorted(set(payload) - {"text", "texts"})
    if unknown:
        raise BadRequest(422, f"unknown field {unknown[0]!r}; {expected}")
    if ("text" in payload) == ("texts" in payload):
        raise BadRequest(422, f"{expected}, not both" if payload else f"{expected}, got an empty object")
    if "text" in payload:
        return [_text(payload["text"], '"text"')], True
    texts = payload["texts"]
    if not isinstance(texts, list) or not texts:
        raise BadRequest(422, f'"texts" must be a non-empty list of strings, got {_kind(texts)}')
    return [_text(t, f'"texts"[{i}]') for i, t in enumerate(texts)], False


def _kind(value) -> str:
    if isinstance(value, list) and not value:
        return "an empty list"
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _text(value, where: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(422, f"{where} must be a string, got {_kind(value)}")
    if not value.strip():
        raise BadRequest(422, f"{where} is empty or whitespace-only")
    return value


class Batcher:
    """Group concurrent requests' texts into calls of `predict(texts) -> rows` (see the module docstring).
    `calls` counts the calls made."""

    def __init__(self, predict: Callable[[list[str]], list[dict]], max_batch: int, max_wait: float):
        self.predict, self.max_batch, self.max_wait = predict, max_batch, max_wait
        self.calls = 0
        self.queue: asyncio.Queue | None = None
        self.worker: asyncio.Task | None = None

    def start(self) -> None:
        """Start the worker in the running event loop (the first request does it when the server did not)."""
        if self.worker is None or self.worker.done():
            self.queue = asyncio.Queue()
            self.worker = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self.worker is not None:
            self.worker.cancel()
            try:
                await self.worker
            except asyncio.CancelledError:
                pass
            self.worker = None

    async def submit(self, texts: list[str]) -> list[dict]:
        """Queue one request's texts and wait for their rows."""
        self.start()
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((texts, future))
        return await future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            group = [await self.queue.get()]
            gathered = len(group[0][0])
            deadline = loop.time() + self.max_wait
            while gathered < self.max_batch:
                left = deadline - loop.time()
                try:
                    item = self.queue.get_nowait() if left <= 0 else await asyncio.wait_for(self.queue.get(), left)
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                group.append(item)
                gathered += len(item[0])
            texts = [t for item, _ in group for t in item]
            self.calls += 1
            try:
                rows = await asyncio.to_thread(self.predict, texts)
            except Exception as error:  # every request of the batch learns of it; the worker carries on
                for _, future in group:
                    if not future.done():
                        future.set_exception(error)
                continue
            start = 0
            for item, future in group:
                if not future.done():  # a client that went away leaves a cancelled future
                    future.set_result(rows[start : start + len(item)])
                start += len(item)


def load_predictor(model_dir: str | Path):
    """(the model, its backend name) for a run folder, a saved model folder or an exported folder."""
    from longbert.inference.exported import ExportedClassifier, is_export_folder
    from longbert.modeling.classifier import LongDocumentClassifier

    if is_export_folder(model_dir):
        predictor = ExportedClassifier(model_dir)
        return predictor, f"onnx-{predictor.precision}"
    return LongDocumentClassifier.from_pretrained(model_dir), "pytorch"


def build_app(predictor, max_batch: int = 16, max_wait_ms: float = 5.0, name: str = "model", backend: str = "pytorch"):
    """The FastAPI application serving `predictor` (anything with `predict(texts, batch_size)` and `label_names`).
    Its batcher is `app.state.batcher`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    check_batching(max_batch, max_wait_ms)
    batcher = Batcher(lambda texts: predictor.predict(texts, batch_size=max_batch), max_batch, max_wait_ms / 1000)

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="longbert", summary=f"classify long documents with {name}", lifespan=lifespan)
    app.state.batcher = batcher

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": name, "backend": backend, "labels": list(predictor.label_names),
                "max_batch": max_batch}

    @app.post("/predict")
    async def predict(request: Request):
        try:
            texts, single = parse_request(await request.body())
        except BadRequest as error:
            return JSONResponse({"error": str(error)}, status_code=error.status)
        try:
            rows = await batcher.submit(texts)
        except LongbertError as error:
            return JSONResponse({"error": str(error)}, status_code=422)
        return rows[0] if single else {"predictions": rows}

    return app


def check_batching(max_batch: int, max_wait_ms: float) -> None:
    if max_batch < 1:
        raise LongbertError(f"--max-batch must be >= 1, got {max_batch}")
    if not 0 <= max_wait_ms <= 1000:
        raise LongbertError(f"--max-wait-ms must be between 0 and 1000, got {max_wait_ms}")


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: any free one), or one LongbertError line saying why not."""
    if not 0 <= port <= 65535:
        raise LongbertError(f"--port must be between 0 and 65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise LongbertError(f"--host {host}: not an address this machine can listen on ({error.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise LongbertError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, max_batch: int = 16,
          max_wait_ms: float = 5.0, announce: Callable[[str], None] = print) -> None:
    """Serve the model in `model_dir` until interrupted (see the module docstring). Every user error (a missing
    extra, a folder that is not a model, a port in use, bad batching settings) is one LongbertError line, raised
    before the server starts."""
    from longbert.utils.extras import require

    require("serve", "longbert serve")
    import uvicorn

    check_batching(max_batch, max_wait_ms)
    sock = listen(host, port)
    try:
        predictor, backend = load_predictor(model_dir)
        app = build_app(predictor, max_batch, max_wait_ms, name=str(model_dir), backend=backend)
        bound_host, bound_port = sock.getsockname()[:2]
        announce(f"serving {model_dir} ({backend}) on http://{bound_host}:{bound_port}: POST /predict, GET /health")
        uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[sock])
    finally:
        sock.close()
