"""What `longbert serve` says to its clients: the most work one request may ask for (`Limits`, whose defaults the
CLI's options show), how the body of POST /predict is read and checked (`parse_request`, `BadRequest`), the request
and answer schemas its OpenAPI page declares (so that /docs can send a request and shows what comes back), and the
counters GET /metrics exposes in Prometheus' text format (requests and errors by status, documents, tokens, latency).
Standard library only at import (the CLI reads `Limits` at start-up); pydantic (with FastAPI, the serve extra) loads
when the schemas are first asked for."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from longbert.errors import LongbertError


@dataclass(frozen=True)
class Limits:
    """The most work one request may ask for; a request over a limit is answered 413 with the option that sets it."""

    body_bytes: int = 8 * 1024 * 1024  # 8 MiB: some hundred long documents, or one book
    texts: int = 256
    tokens: int = 262_144  # tokens the model reads: each text counts up to the model's max_document_tokens

    def check(self) -> None:
        for option, value in (("--max-request-bytes", self.body_bytes), ("--max-request-texts", self.texts),
                              ("--max-request-tokens", self.tokens)):
            if value < 1:
                raise LongbertError(f"{option} must be >= 1, got {value}")


class BadRequest(Exception):
    """A request /predict cannot answer: `status` (400, 413 or 422) and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class PredictRequest(NamedTuple):
    """What a POST /predict body asks: its texts, whether it was one "text", and its "min_confidence" (None: the
    server's)."""

    texts: list[str]
    single: bool
    min_confidence: float | None = None


def parse_request(body: bytes, max_texts: int | None = None) -> PredictRequest:
    """The body of POST /predict -> a `PredictRequest`, or BadRequest saying what is wrong (413 when it holds more
    than `max_texts` texts)."""
    try:
        payload = json.loads(body.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadRequest(400, "the body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise BadRequest(400, f"the body is not valid JSON ({error.msg}, {where})") from None
    except RecursionError:  # the json module reads nesting by recursion: 100,000 '[' exhaust the stack
        raise BadRequest(400, "the body's JSON nests too deeply to read") from None
    expected = 'the body must be a JSON object with "text" (a string) or "texts" (a list of strings)'
    if not isinstance(payload, dict):
        raise BadRequest(422, f"{expected}, got {_kind(payload)}")
    unknown = sorted(set(payload) - {"text", "texts", "min_confidence"})
    if unknown:
        raise BadRequest(422, f'unknown field {unknown[0]!r}; {expected}, and optionally "min_confidence"')
    if ("text" in payload) == ("texts" in payload):
        got = "not both" if "text" in payload else "got an empty object" if not payload else "got neither"
        raise BadRequest(422, f"{expected}, {got}")
    minimum = _min_confidence(payload.get("min_confidence"))
    if "text" in payload:
        return PredictRequest([_text(payload["text"], '"text"')], True, minimum)
    texts = payload["texts"]
    if not isinstance(texts, list) or not texts:
        raise BadRequest(422, f'"texts" must be a non-empty list of strings, got {_kind(texts)}')
    if max_texts is not None and len(texts) > max_texts:  # before reading each text: the count alone refuses it
        raise BadRequest(413, f"the request holds {len(texts):,} texts, over the limit of {max_texts:,} per request "
                              "(longbert serve --max-request-texts)")
    return PredictRequest([_text(t, f'"texts"[{i}]') for i, t in enumerate(texts)], False, minimum)


def _min_confidence(value) -> float | None:
    """A request's "min_confidence": null or absent (the server's), or a number in (0, 1), else 422."""
    # Here, not at the top: the CLI's start-up reads this module, which loads no torch until a request is read.
    from longbert.modeling.reads_texts import check_min_confidence  # noqa: PLC0415 (torch-free: see above)

    try:
        check_min_confidence(value, '"min_confidence"')
    except LongbertError as error:
        raise BadRequest(422, str(error)) from None
    return value


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
    try:  # JSON's \ud800 escapes decode to lone surrogates, which no tokenizer takes
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(422, f"{where} holds {value[error.start]!r} at character {error.start}, half of a "
                              "surrogate pair, which is not text") from None
    return value


def openapi_schemas() -> dict:
    """The keyword arguments of the /predict and /health routes that declare their schemas: the request body (one
    "text", or a list of "texts"), the answers (one prediction, or "predictions"), and the error answer. The route
    still reads the body itself (`parse_request`), so that its limits hold before any of it is parsed."""
    from pydantic import BaseModel, Field  # noqa: PLC0415 (optional extra: longbert[serve], with FastAPI)

    minimum = Field(None, gt=0, lt=1, description="abstain on a document whose confidence (its top probability; "
                    "multi-label: its least sure label's max(p, 1 - p)) is below this (default: the server's "
                    "--min-confidence, else none)")

    class OneText(BaseModel):
        text: str = Field(description="a document of any length", examples=["A long review ..."])
        min_confidence: float | None = minimum

    class ManyTexts(BaseModel):
        texts: list[str] = Field(description="documents of any length, answered in order", min_length=1)
        min_confidence: float | None = minimum

    class Prediction(BaseModel):
        label: str | None = Field(None, description="the predicted class (single-label models); null when abstained")
        labels: list[str] | None = Field(None, description="the predicted classes (multi-label models); null when "
                                                           "abstained")
        abstained: bool | None = Field(None, description="with a minimum confidence: whether the model abstained")
        probabilities: dict[str, float] = Field(description="each class's probability")
        n_tokens: int = Field(description="the text's length in tokens with [CLS]/[SEP]; over the model's "
                                          "max_document_tokens + 2, the text was cut")

    class Predictions(BaseModel):
        predictions: list[Prediction]

    class Problem(BaseModel):
        error: str = Field(description="one line saying what is wrong")

    class Health(BaseModel):
        status: str
        model: str
        backend: str
        labels: list[str]
        max_batch: int

    body = {"oneOf": [OneText.model_json_schema(), ManyTexts.model_json_schema()]}
    answers = {"oneOf": [Prediction.model_json_schema(ref_template="#/components/schemas/{model}"),
                         Predictions.model_json_schema(ref_template="#/components/schemas/{model}")]}
    definitions = {**answers["oneOf"][0].pop("$defs", {}), **answers["oneOf"][1].pop("$defs", {})}
    problem = {"model": Problem}
    predict = {
        "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {"schema": body}}}},
        "responses": {200: {"description": "one prediction for 'text', or 'predictions' for 'texts'",
                            "content": {"application/json": {"schema": answers}}},
                      400: {**problem, "description": "the body is not JSON"},
                      413: {**problem, "description": "more work than the server's limits allow"},
                      422: {**problem, "description": "the JSON does not hold what /predict needs"},
                      499: {**problem, "description": "the client disconnected before its texts ran"},
                      500: {**problem, "description": "a fault of the server; its log says why"}},
    }
    return {"predict": predict, "health": {"response_model": Health}, "definitions": definitions}


@dataclass
class Counters:
    """What /predict has done since the server started, for GET /metrics: requests by status, documents and tokens
    answered, and the time requests took. Updated from the server's threads under a lock."""

    statuses: dict[int, int] = field(default_factory=dict)
    documents: int = 0
    tokens: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def request(self, status: int, seconds: float) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.seconds += seconds

    def answered(self, rows: list[dict]) -> None:
        with self.lock:
            self.documents += len(rows)
            self.tokens += sum(row["n_tokens"] for row in rows)

    def text(self) -> str:
        """The counters in Prometheus' text exposition format (version 0.0.4)."""
        with self.lock:
            requests = sum(self.statuses.values())
            errors = sum(n for status, n in self.statuses.items() if status >= 400)
            lines = ["# HELP longbert_requests_total POST /predict requests answered, by HTTP status.",
                     "# TYPE longbert_requests_total counter"]
            lines += [f'longbert_requests_total{{status="{status}"}} {n}'
                      for status, n in sorted(self.statuses.items())]
            for name, kind, value, about in (
                    ("longbert_errors_total", "counter", errors, "requests answered with a 4xx or 5xx status."),
                    ("longbert_documents_total", "counter", self.documents, "documents classified."),
                    ("longbert_tokens_total", "counter", self.tokens, "tokens of the documents classified."),
                    ("longbert_request_seconds_sum", "counter", round(self.seconds, 6),
                     "seconds spent answering POST /predict, from arrival to answer."),
                    ("longbert_request_seconds_count", "counter", requests, "requests timed.")):
                lines += [f"# HELP {name} {about}", f"# TYPE {name} {kind}", f"{name} {value}"]
            return "\n".join(lines) + "\n"
