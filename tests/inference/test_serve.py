"""`longbert serve`: the HTTP endpoint answers what `model.predict` answers, refuses bad requests with 4xx and one
line, and groups concurrent requests into fewer forward calls. Loopback only: starlette's TestClient, and a real
uvicorn server on 127.0.0.1 on a free port."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from helpers import assert_user_error, build_model
from longbert.cli import app as cli
from longbert.errors import LongbertError

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from longbert.inference.serve import build_app, listen, serve  # noqa: E402
from longbert.inference.serve_api import BadRequest, parse_request  # noqa: E402

runner = CliRunner()
TEXTS = ["A fine film.", "Dull and far too long. " * 30, "I laughed, I cried, I left early."]


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    return build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=attention"])


@pytest.fixture(scope="module")
def model_dir(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve") / "model"
    model.save_pretrained(folder)
    return folder


def assert_same_rows(got, expected):
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    assert [r["n_tokens"] for r in got] == [r["n_tokens"] for r in expected]
    for a, b in zip(got, expected):  # batches padded differently: the same up to float rounding
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-4)


def test_health_and_predict_equal_model_predict(model):
    with TestClient(build_app(model, max_batch=4, name="tiny")) as client:
        health = client.get("/health").json()
        assert health == {"status": "ok", "model": "tiny", "backend": "pytorch", "labels": ["neg", "pos"],
                          "max_batch": 4}
        many = client.post("/predict", json={"texts": TEXTS})
        one = client.post("/predict", json={"text": TEXTS[1]})
    assert many.status_code == 200 and one.status_code == 200
    expected = model.predict(TEXTS)
    assert_same_rows(many.json()["predictions"], expected)
    assert_same_rows([one.json()], expected[1:2])


@pytest.mark.parametrize("body, status, message", [
    (b'{"texts": ["a", ', 400, "the body is not valid JSON (Expecting value, line 1 column 17)"),
    (b"\xff\xfe", 400, "the body is not UTF-8 text"),
    (b"", 400, "the body is not valid JSON"),
    (b'["a text"]', 422,
     'the body must be a JSON object with "text" (a string) or "texts" (a list of strings), got a list'),
    (b"{}", 422, "got an empty object"),
    (b'{"text": "a", "texts": ["b"]}', 422, "not both"),
    (b'{"txt": "a"}', 422, "unknown field 'txt'"),
    (b'{"text": 5}', 422, '"text" must be a string, got a number'),
    (b'{"text": "  \\n "}', 422, '"text" is empty or whitespace-only'),
    (b'{"texts": []}', 422, '"texts" must be a non-empty list of strings, got an empty list'),
    (b'{"texts": "one"}', 422, '"texts" must be a non-empty list of strings, got a string'),
    (b'{"texts": ["fine", null]}', 422, '"texts"[1] must be a string, got null'),
    (b'{"texts": ["fine", ""]}', 422, '"texts"[1] is empty or whitespace-only'),
    (b'{"texts": ["fine", "x \\udc80"]}', 422, '"texts"[1] holds \'\\udc80\' at character 2, half of a surrogate pair'),
    (b"[" * 100_000 + b"]" * 100_000, 400, "the body's JSON nests too deeply to read"),
    (b'{"min_confidence": 0.5}', 422, "got neither"),
    (b'{"text": "a", "min_confidence": 1}', 422, '"min_confidence" must be a number in (0, 1), got 1'),
    (b'{"texts": ["a"], "min_confidence": "high"}', 422, '"min_confidence" must be a number in (0, 1), got \'high\''),
], ids=["bad-json", "not-utf8", "no-body", "list", "empty-object", "both", "unknown-field", "number", "blank-text",
        "empty-list", "texts-string", "null-text", "empty-text", "lone-surrogate", "nested-100000-deep",
        "min-confidence-alone", "min-confidence-1", "min-confidence-string"])
def test_bad_requests_get_4xx_and_one_line(model, body, status, message):
    with pytest.raises(BadRequest) as raised:
        parse_request(body)
    assert raised.value.status == status and message in str(raised.value)
    client = TestClient(build_app(model))
    response = client.post("/predict", content=body)
    assert response.status_code == status
    assert list(response.json()) == ["error"] and message in response.json()["error"]
    assert "\n" not in response.json()["error"]


def test_unknown_routes_and_methods_answer_in_the_same_form(model):
    client = TestClient(build_app(model))
    assert (client.get("/nope").status_code, client.get("/nope").json()) == (404, {"error": "Not Found"})
    assert (client.get("/predict").status_code, client.get("/predict").json()) == (405, {"error": "Method Not Allowed"})


def test_concurrent_requests_share_forward_calls(model):
    """Eight clients at once on a real server: answered correctly, in fewer forward calls than requests."""
    import uvicorn

    calls = []
    forward = model.forward
    model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)  # count calls into the model
    app = build_app(model, max_batch=8, max_wait_ms=300)
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        texts = [f"{TEXTS[i % 3]} Review number {i}." for i in range(8)]
        with httpx.Client(base_url=url, timeout=60) as client:
            with ThreadPoolExecutor(8) as pool:
                responses = list(pool.map(lambda t: client.post("/predict", json={"text": t}), texts))
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        del model.forward
    assert [r.status_code for r in responses] == [200] * 8
    assert_same_rows([r.json() for r in responses], model.predict(texts))
    assert 1 <= app.state.batcher.calls < 8 and len(calls) == app.state.batcher.calls


def test_serve_wires_the_model_into_uvicorn(model_dir, monkeypatch):
    import uvicorn

    served = {}
    run_server = lambda self, sockets: served.update(app=self.config.app, sockets=sockets)
    monkeypatch.setattr(uvicorn.Server, "run", run_server)
    said = []
    serve(model_dir, "127.0.0.1", 0, max_batch=2, announce=said.append)
    assert said[0].startswith(f"serving {model_dir} (pytorch) on http://127.0.0.1:") and "POST /predict" in said[0]
    with TestClient(served["app"]) as client:
        assert client.get("/health").json()["max_batch"] == 2
        assert client.post("/predict", json={"text": "good"}).json()["label"] in ("neg", "pos")


def test_user_errors_are_one_line(model_dir, tmp_path, monkeypatch):
    taken = listen("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        taken.listen()
        assert_user_error(runner.invoke(cli, ["serve", str(model_dir), "--port", str(port)]),
                          f"cannot listen on 127.0.0.1:{port}")
    finally:
        taken.close()
    run = lambda *args: runner.invoke(cli, ["serve", str(model_dir), "--port", "0", *args])
    assert_user_error(run("--max-batch", "0"), "--max-batch must be >= 1, got 0")
    assert_user_error(run("--max-wait-ms", "-1"), "--max-wait-ms must be between 0 and 1000, got -1.0")
    assert_user_error(runner.invoke(cli, ["serve", str(model_dir), "--port", "70000"]),
                      "--port must be between 0 and 65535")
    assert_user_error(runner.invoke(cli, ["serve", str(tmp_path), "--port", "0"]), "is not a longbert model folder")
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert_user_error(run(), "longbert serve needs uvicorn, which is not installed: pip install 'longbert[serve]'")
    with pytest.raises(LongbertError, match="--max-batch must be >= 1"):
        build_app(object(), max_batch=0)


def test_the_openapi_page_declares_both_request_forms_and_every_answer(model):
    document = TestClient(build_app(model)).get("/openapi.json").json()
    predict = document["paths"]["/predict"]["post"]
    body = predict["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert [sorted(form["properties"]) for form in body] == [["min_confidence", "text"], ["min_confidence", "texts"]]
    assert {"200", "400", "413", "422", "499", "500"} <= set(predict["responses"])
    answers = predict["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"]
    assert sorted(answers[0]["properties"]) == ["abstained", "label", "labels", "n_tokens", "probabilities"]
    assert answers[1]["properties"]["predictions"]["items"]["$ref"] == "#/components/schemas/Prediction"
    assert "Prediction" in document["components"]["schemas"]  # every $ref resolves
    problem = predict["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
    assert document["components"]["schemas"][problem]["properties"]["error"]["type"] == "string"
    health = document["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert health["$ref"].endswith("/Health")


def test_metrics_count_requests_by_status_documents_tokens_and_time(model):
    with TestClient(build_app(model, max_batch=4)) as client:
        rows = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
        client.post("/predict", json={"text": TEXTS[0]})
        client.post("/predict", content=b"{not json")
        client.get("/health")  # not counted: only /predict is
        text = client.get("/metrics").text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if not line.startswith("#")}
    assert values['longbert_requests_total{status="200"}'] == 2 and values['longbert_requests_total{status="400"}'] == 1
    assert values["longbert_errors_total"] == 1 and values["longbert_request_seconds_count"] == 3
    assert values["longbert_documents_total"] == len(TEXTS) + 1
    assert values["longbert_tokens_total"] == sum(r["n_tokens"] for r in rows) + rows[0]["n_tokens"]
    assert values["longbert_request_seconds_sum"] > 0
    assert "# TYPE longbert_requests_total counter" in text


def test_a_client_gone_before_its_body_arrived_is_counted_499_without_a_traceback(model, caplog):
    """`Content-Length: 100`, then `{`, then the client disconnects: once a ClientDisconnect traceback in the log and
    a 500 in /metrics; now the same answer as a client gone during inference."""
    import asyncio

    app = build_app(model, max_batch=4)
    messages = iter([{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/predict", "raw_path": b"/predict",
             "query_string": b"", "root_path": "", "scheme": "http", "server": ("test", 80), "client": ("c", 1),
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")]}
    with TestClient(app) as client:  # started: its batcher runs
        asyncio.run(app(scope, receive, send))
        text = client.get("/metrics").text
    assert sent[0]["status"] == 499
    assert 'longbert_requests_total{status="499"} 1' in text and 'status="500"' not in text
    assert "Traceback" not in caplog.text and "ClientDisconnect" not in caplog.text
