"""`longbert serve`: classify texts over HTTP (FastAPI on uvicorn) with a saved model, a run folder's kept model, or
an exported folder (onnxruntime, see exported.py). Concurrent requests are grouped into batches.

    GET  /health   -> {"status": "ok", "model", "backend" (pytorch, onnx-int8, openvino-bf16, ...), "labels", ...}
    GET  /metrics  -> requests by status, errors, documents, tokens and latency, in Prometheus' text format
    GET  /docs     -> the OpenAPI page: both request forms and every answer declared, so a request can be tried
    POST /predict  {"text": "..."}            -> one prediction: label (labels when multi-label), probabilities,
                                                 n_tokens
                   {"texts": ["...", ...]}    -> {"predictions": [one per text, in order]}
                   either with "min_confidence": P  -> each prediction says "abstained", its label null where the
                                                 model is less sure than P (default: the server's --min-confidence)
Bad requests are answered with 4xx and {"error": "one line"}: 400 when the body is not JSON (or nests deeper than a
JSON reader goes), 413 when it asks for more work than the server's `Limits` allow (body bytes, texts, tokens), 422
when it does not hold what /predict needs (no text, a text that is empty, not a string or not encodable text, an
unknown field); an unknown route or method gets 404 / 405 in the same form, and a fault of the server itself 500 (its
traceback goes to the server's log). Every request succeeds or fails alone.

Batching: a request's texts are cut into pieces of at most `max_batch` texts, and each request has at most one piece
in line at a time (its next piece joins the back of the line when the last one is done), so that a small request
waits for one piece of each request ahead of it, not for the whole of a big one. A worker takes the first piece in
line, then more for up to `max_wait_ms` while they fit in `max_batch` texts, drops the pieces of clients that have
disconnected, runs the model once on the rest in a thread (so the server keeps accepting requests meanwhile), and
hands each piece its own rows. When that run fails, each piece is run alone, so that only the request that broke it
fails. Under load the next batch gathers while the current one runs.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations (Request) at run time.
import asyncio
import logging
import socket
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from longbert.errors import LongbertError
from longbert.inference.exported import ExportedClassifier
from longbert.inference.openvino_runtime import OpenVINOModel, check_export_runtime, check_runtime
from longbert.inference.serve_api import BadRequest, Counters, Limits, openapi_schemas, parse_request
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.reads_texts import check_min_confidence, with_abstention
from longbert.utils.extras import require
from longbert.utils.hardware import autocast_for, check_precision, process_state

log = logging.getLogger("longbert.serve")
SERVER_FAULT = "the server failed on this request; its log says why"


class ClientGone(Exception):
    """The client disconnected before its texts ran (or before its body arrived): their work was dropped."""




async def read_body(request, limit: int) -> bytes:
    """The request's body, read no further than `limit` bytes (413 beyond it, said by Content-Length or found)."""
    too_big = BadRequest(413, f"the body is over {limit:,} bytes, the limit per request "
                              "(longbert serve --max-request-bytes)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    from starlette.requests import ClientDisconnect  # noqa: PLC0415 (optional extra: longbert[serve])

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
    except ClientDisconnect:  # gone before its body arrived: the same answer as gone before its texts ran (499)
        raise ClientGone() from None
    return b"".join(chunks)


def check_tokens(predictor, texts: list[str], limit: int) -> None:
    """413 when the texts come to more than `limit` tokens as the model reads them (each cut at its token cap).
    This tokenizes the texts once more than predicting does, which costs little next to the model."""
    documents, _ = predictor.tokenize(texts)
    tokens = sum(len(ids) for ids in documents)
    if tokens > limit:
        cap = predictor.settings.max_document_tokens
        raise BadRequest(413, f"the texts come to {tokens:,} tokens (each counted up to max_document_tokens="
                              f"{cap:,}), over the limit of {limit:,} per request "
                              "(longbert serve --max-request-tokens)")


@dataclass
class Piece:
    """Up to `max_batch` texts of one request, the future that gets their rows, and how to ask whether the client is
    gone."""

    texts: list[str]
    future: asyncio.Future
    gone: Callable[[], Awaitable[bool]] | None = None


class Batcher:
    """Group concurrent requests' texts into calls of `predict(texts) -> rows` (see the module docstring).
    `calls` counts the calls made, `dropped` the pieces dropped because their client went away."""

    def __init__(self, predict: Callable[[list[str]], list[dict]], max_batch: int, max_wait: float):
        self.predict, self.max_batch, self.max_wait = predict, max_batch, max_wait
        self.calls = self.dropped = 0
        self.line: deque[Piece] = deque()
        self.arrived: asyncio.Event | None = None
        self.worker: asyncio.Task | None = None

    def start(self) -> None:
        """Start the worker in the running event loop (the first request does it when the server did not, or when the
        server's loop is another one, as starlette's TestClient makes without `with`)."""
        loop = asyncio.get_running_loop()
        if self.worker is None or self.worker.done() or self.worker.get_loop() is not loop:
            self.line, self.arrived = deque(), asyncio.Event()
            self.worker = loop.create_task(self.run())

    async def stop(self) -> None:
        if self.worker is not None:
            self.worker.cancel()
            try:
                await self.worker
            except asyncio.CancelledError:
                pass
            self.worker = None

    async def submit(self, texts: list[str], gone: Callable[[], Awaitable[bool]] | None = None) -> list[dict]:
        """One request's texts -> their rows, in order, its pieces joining the line one at a time. Raises what
        running a piece raised, or ClientGone when `gone()` said the client had disconnected."""
        self.start()
        rows = []
        for start in range(0, len(texts), self.max_batch):
            piece = Piece(texts[start : start + self.max_batch], asyncio.get_running_loop().create_future(), gone)
            self.line.append(piece)
            self.arrived.set()
            rows += await piece.future
        return rows

    async def next_piece(self, deadline: float | None = None, room: int | None = None) -> Piece | None:
        """The first piece in line (waiting for one until `deadline`, forever without one); None when none came
        or the first does not fit in `room` texts (it is not overtaken: it leads the next batch)."""
        loop = asyncio.get_running_loop()
        while True:
            while self.line and self.line[0].future.done():  # its request was cancelled
                self.line.popleft()
            if self.line:
                return self.line.popleft() if room is None or len(self.line[0].texts) <= room else None
            self.arrived.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except asyncio.TimeoutError:
                return None

    async def wanted(self, piece: Piece) -> bool:
        """Whether the piece is still to run: its request is waiting and its client is still there."""
        if piece.future.done():
            return False
        try:
            gone = piece.gone is not None and await piece.gone()
        except Exception:  # a failing check is no proof of absence: run the piece
            gone = False
        if gone:
            self.dropped += 1
            piece.future.set_exception(ClientGone())
        return not gone

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            group = [await self.next_piece()]
            size = len(group[0].texts)
            deadline = loop.time() + self.max_wait
            while size < self.max_batch:
                piece = await self.next_piece(deadline, self.max_batch - size)
                if piece is None:
                    break
                group.append(piece)
                size += len(piece.texts)
            group = [piece for piece in group if await self.wanted(piece)]
            if not group:
                continue
            try:
                rows = await self.call([t for piece in group for t in piece.texts])
            except Exception as error:
                if len(group) == 1:
                    _settle(group[0], error=error)
                    continue
                for piece in group:  # one piece broke the batch: each alone, so that only the one at fault fails
                    if await self.wanted(piece):
                        try:
                            _settle(piece, rows=await self.call(piece.texts))
                        except Exception as alone:
                            _settle(piece, error=alone)
                continue
            start = 0
            for piece in group:
                _settle(piece, rows=rows[start : start + len(piece.texts)])
                start += len(piece.texts)

    async def call(self, texts: list[str]) -> list[dict]:
        self.calls += 1
        return await asyncio.to_thread(self.predict, texts)


def _settle(piece: Piece, rows: list[dict] | None = None, error: Exception | None = None) -> None:
    if piece.future.done():  # a client that went away leaves a cancelled future
        return
    piece.future.set_exception(error) if error is not None else piece.future.set_result(rows)


def load_predictor(model_dir: str | Path, precision: str = "auto", calibrated: bool = True, runtime: str = "torch"):
    """(the model, its backend name) for a run folder, a saved model folder or an exported folder (which runs as it
    was exported). Before the first request: a PyTorch model's `precision` checked, its int8 wrapper made, or with
    `runtime` openvino its encoder compiled. `calibrated=False`: without its calibration (`without_calibration`)."""
    check_precision(precision, "--precision")
    check_runtime(runtime)
    if (exported := check_export_runtime(model_dir, precision, runtime)) or runtime == "openvino":
        predictor = ExportedClassifier(model_dir) if exported else OpenVINOModel(
            LongDocumentClassifier.from_pretrained(model_dir), precision)
        if not calibrated:
            predictor.without_calibration()
        return predictor, f"{'onnx' if exported else runtime}-{predictor.precision}"
    # On the machine's accelerator where there is one, as `predict` runs; int8 runs on the CPU only.
    device = "cpu" if precision == "int8" else process_state().device
    model = LongDocumentClassifier.from_pretrained(model_dir).to(device)
    if not calibrated:
        model.without_calibration()  # before the int8 wrapper is made: it copies the settings
    autocast_for(model, precision)  # refuses what the device cannot run
    model.for_precision(precision)  # the int8 wrapper (its quantized copy), before the first request
    return model, "pytorch" if precision == "auto" else f"pytorch-{precision}"


def build_app(predictor, max_batch: int = 16, max_wait_ms: float = 5.0, name: str = "model", backend: str = "pytorch",
              limits: Limits = Limits(), precision: str = "auto", min_confidence: float | None = None):
    """The FastAPI application serving `predictor` (with `predict(texts, batch_size[, precision])`, `tokenize`,
    `settings`, `label_names`: LongDocumentClassifier, ExportedClassifier). Its batcher is `app.state.batcher`.
    `min_confidence`: the minimum confidence of a request that names none (None: no abstention)."""
    from fastapi import FastAPI  # noqa: PLC0415 (optional extra: longbert[serve])

    check_batching(max_batch, max_wait_ms)
    limits.check()
    check_min_confidence(min_confidence)
    options = {} if precision == "auto" else {"precision": precision}
    batcher = Batcher(lambda texts: predictor.predict(texts, batch_size=max_batch, **options), max_batch,
                      max_wait_ms / 1000)

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="longbert", summary=f"classify long documents with {name}", lifespan=lifespan)
    app.state.batcher, app.state.counters = batcher, Counters()
    schemas = openapi_schemas()
    _add_error_handlers(app)
    _add_info_routes(app, schemas, predictor, name, backend, max_batch)
    _add_predict_route(app, schemas["predict"], predictor, batcher, limits, min_confidence)
    openapi = app.openapi
    app.openapi = lambda: _with_definitions(openapi(), schemas["definitions"])
    return app


def _add_error_handlers(app) -> None:
    """Answer an HTTP error (an unknown route or method) with its status, and any other fault with 500, as
    {"error": "one line"}."""
    from fastapi import Request  # noqa: PLC0415 (optional extra: longbert[serve])
    from fastapi.responses import JSONResponse  # noqa: PLC0415 (optional extra: longbert[serve])
    from starlette.exceptions import HTTPException  # noqa: PLC0415 (optional extra: longbert[serve])

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)

    @app.exception_handler(Exception)
    async def server_fault(request: Request, error: Exception):
        return JSONResponse({"error": SERVER_FAULT}, status_code=500)


def _add_info_routes(app, schemas: dict, predictor, name: str, backend: str, max_batch: int) -> None:
    """GET /metrics and GET /health."""
    from fastapi.responses import PlainTextResponse  # noqa: PLC0415 (optional extra: longbert[serve])

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        return app.state.counters.text()

    @app.get("/health", **schemas["health"])
    async def health():
        return {"status": "ok", "model": name, "backend": backend, "labels": list(predictor.label_names),
                "max_batch": max_batch}


def _add_predict_route(app, schema: dict, predictor, batcher: Batcher, limits: Limits,
                       min_confidence: float | None) -> None:
    """POST /predict, each request counted with its status and latency."""
    from fastapi import Request  # noqa: PLC0415 (optional extra: longbert[serve])
    from fastapi.responses import JSONResponse  # noqa: PLC0415 (optional extra: longbert[serve])

    @app.post("/predict", **schema)
    async def predict(request: Request):
        # Counted here, not in a middleware: starlette's BaseHTTPMiddleware hides a client's disconnect from
        # request.is_disconnected, which the batcher asks to drop the work of clients that went away.
        started = time.perf_counter()
        answer = await _answer_predict(request, app, predictor, batcher, limits, min_confidence)
        status = answer.status_code if isinstance(answer, JSONResponse) else 200
        app.state.counters.request(status, time.perf_counter() - started)
        return answer


async def _answer_predict(request, app, predictor, batcher: Batcher, limits: Limits, min_confidence: float | None):
    """A /predict request's answer: its prediction(s), abstaining below its own "min_confidence" or else the
    server's `min_confidence`, or a JSONResponse {"error": ...} with the status that says why not (see the module
    docstring)."""
    from fastapi.responses import JSONResponse  # noqa: PLC0415 (optional extra: longbert[serve])

    try:
        texts, single, asked = parse_request(await read_body(request, limits.body_bytes), limits.texts)
        await asyncio.to_thread(check_tokens, predictor, texts, limits.tokens)
        rows = await batcher.submit(texts, request.is_disconnected)
        minimum = min_confidence if asked is None else asked
        if minimum is not None:  # each request's own: rows of one batch may answer requests of other minimums
            rows = [with_abstention(predictor.settings, row, minimum) for row in rows]
    except BadRequest as error:
        return JSONResponse({"error": str(error)}, status_code=error.status)
    except LongbertError as error:
        return JSONResponse({"error": str(error)}, status_code=422)
    except ClientGone:  # nobody reads this answer; 499 is what proxies log for a client that closed
        return JSONResponse({"error": "the client disconnected"}, status_code=499)
    except Exception:
        log.exception("POST /predict failed")
        return JSONResponse({"error": SERVER_FAULT}, status_code=500)
    app.state.counters.answered(rows)
    return rows[0] if single else {"predictions": rows}


def _with_definitions(document: dict, definitions: dict) -> dict:
    """The OpenAPI document with the schemas that /predict's answers refer to added to its components."""
    document.setdefault("components", {}).setdefault("schemas", {}).update(definitions)
    return document


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
          max_wait_ms: float = 5.0, announce: Callable[[str], None] = print, *,
          max_request_bytes: int = Limits.body_bytes, max_request_texts: int = Limits.texts,
          max_request_tokens: int = Limits.tokens, precision: str = "auto", calibrated: bool = True,
          min_confidence: float | None = None, runtime: str = "torch") -> None:
    """Serve the model in `model_dir` until interrupted (see the module docstring); a request may carry at most
    `max_request_bytes` of body, `max_request_texts` texts and `max_request_tokens` tokens (`Limits`). Every user
    error (a missing extra, a folder that is not a model or holds a damaged graph, a port in use, bad batching
    settings or limits, a precision the model or device cannot run: `load_predictor`) is one LongbertError line,
    raised before the server starts. `calibrated=False`: without the model's calibration; `min_confidence`: the
    minimum confidence of requests that name none."""
    require("serve", "longbert serve")
    import uvicorn  # noqa: PLC0415 (optional extra: longbert[serve])

    check_batching(max_batch, max_wait_ms)
    check_min_confidence(min_confidence, "--min-confidence")
    limits = Limits(max_request_bytes, max_request_texts, max_request_tokens)
    limits.check()
    sock = listen(host, port)
    try:
        predictor, backend = load_predictor(model_dir, precision, calibrated, runtime)
        app = build_app(predictor, max_batch, max_wait_ms, name=str(model_dir), backend=backend, limits=limits,
                        precision=precision, min_confidence=min_confidence)
        bound_host, bound_port = sock.getsockname()[:2]
        announce(f"serving {model_dir} ({backend}) on http://{bound_host}:{bound_port}: POST /predict, GET /health")
        uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[sock])
    finally:
        sock.close()
