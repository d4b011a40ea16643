"""`longbert serve` under hostile or careless clients: every request succeeds or fails alone (a text that breaks the
model fails only its own request), work per request is limited (413 and one line), a big request does not starve a
small one, the work of a client that went away is dropped, and a fault of the server is a JSON 500. Loopback only."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from helpers import build_model
from longbert.errors import LongbertError

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from longbert.inference.serve import SERVER_FAULT, Batcher, build_app, listen, serve  # noqa: E402
from longbert.inference.serve_api import Limits  # noqa: E402


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    return build_model(tiny_backbone_dir, "chunk")


class Recorder:
    """A stand-in predictor that records every call, fails on a text holding 'break', and waits while `hold` is
    set, so that a test decides what runs when."""

    label_names = ["neg", "pos"]
    settings = SimpleNamespace(max_document_tokens=100)

    def __init__(self):
        self.calls: list[list[str]] = []
        self.hold = threading.Event()
        self.running = threading.Event()

    def tokenize(self, texts):
        documents = [t.split()[: self.settings.max_document_tokens] for t in texts]
        return documents, [len(t.split()) + 2 for t in texts]

    def predict(self, texts, batch_size=16):
        self.calls.append(list(texts))
        self.running.set()
        deadline = time.monotonic() + 30
        while self.hold.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        if any("break" in t for t in texts):
            raise RuntimeError("the model broke")
        return [{"label": "pos", "probabilities": {"neg": 0.0, "pos": 1.0}, "n_tokens": len(t.split()) + 2}
                for t in texts]


@contextmanager
def running(app):
    """A real uvicorn server for `app` on 127.0.0.1 and a free port; yields its URL."""
    import uvicorn

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_a_text_that_breaks_the_model_fails_only_its_own_request():
    async def scenario():
        recorder = Recorder()
        batcher = Batcher(lambda texts: recorder.predict(texts), max_batch=8, max_wait=0.2)
        asks = [batcher.submit([f"good text {i}"]) for i in range(6)] + [batcher.submit(["this will break"])]
        answers = await asyncio.gather(*asks, return_exceptions=True)
        await batcher.stop()
        return answers

    answers = asyncio.run(scenario())
    assert all(isinstance(a, list) and a[0]["label"] == "pos" for a in answers[:6]), answers
    assert isinstance(answers[6], RuntimeError)


def test_bad_and_good_requests_at_once_on_a_real_server(model):
    """Six good requests and two bad ones (a lone surrogate, JSON nested 100,000 deep) at the same moment: the good
    ones are answered, the bad ones get a JSON 4xx of their own."""
    good = [{"text": f"A fine film, number {i}."} for i in range(6)]
    bodies = [json.dumps(b).encode() for b in good] + [b'{"text": "\\ud800 x"}', b"[" * 100_000 + b"]" * 100_000]
    with running(build_app(model, max_batch=8, max_wait_ms=300)) as url, httpx.Client(base_url=url, timeout=60) as c:
        with ThreadPoolExecutor(len(bodies)) as pool:
            responses = list(pool.map(lambda body: c.post("/predict", content=body), bodies))
    assert [r.status_code for r in responses] == [200] * 6 + [422, 400]
    assert all(r.json()["label"] in ("neg", "pos") for r in responses[:6])
    assert "'\\ud800' at character 0, half of a surrogate pair" in responses[6].json()["error"]
    assert responses[7].json() == {"error": "the body's JSON nests too deeply to read"}


def test_requests_over_a_limit_get_413_and_one_line(model):
    limits = Limits(body_bytes=400, texts=3, tokens=50)
    with TestClient(build_app(model, limits=limits)) as client:
        post = lambda **kwargs: client.post("/predict", **kwargs)
        cases = [
            (post(json={"text": "x" * 500}), "the body is over 400 bytes, the limit per request "
                                             "(longbert serve --max-request-bytes)"),
            (post(content=iter([b'{"text": "', b"x" * 500, b'"}'])), "the body is over 400 bytes"),  # no length
            (post(json={"texts": ["a"] * 4}), "the request holds 4 texts, over the limit of 3 per request "
                                              "(longbert serve --max-request-texts)"),
            (post(json={"text": "word " * 60}), "the texts come to 60 tokens (each counted up to "
                                                "max_document_tokens=16,384), over the limit of 50 per request "
                                                "(longbert serve --max-request-tokens)"),
        ]
        for response, message in cases:
            assert response.status_code == 413 and list(response.json()) == ["error"], response.text
            assert message in response.json()["error"] and "\n" not in response.json()["error"]
        at_the_limits = post(json={"texts": ["word " * 16] * 3})
    assert at_the_limits.status_code == 200 and len(at_the_limits.json()["predictions"]) == 3


def test_limits_are_set_through_serve(model, tmp_path, monkeypatch):
    import uvicorn

    model.save_pretrained(tmp_path / "model")
    served = {}
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: served.update(app=self.config.app))
    serve(tmp_path / "model", port=0, announce=lambda line: None, max_request_texts=2)
    with TestClient(served["app"]) as client:
        assert client.post("/predict", json={"texts": ["a", "b", "c"]}).status_code == 413
        assert client.post("/predict", json={"texts": ["a", "b"]}).status_code == 200
    for option, keyword in (("--max-request-bytes", "max_request_bytes"), ("--max-request-texts", "max_request_texts"),
                            ("--max-request-tokens", "max_request_tokens")):
        with pytest.raises(LongbertError, match=f"{option} must be >= 1, got 0"):
            serve(tmp_path / "model", port=0, **{keyword: 0})


def test_a_small_request_is_not_starved_by_a_big_one():
    """A request of 20 texts runs as pieces of `max_batch`; a one-text request that arrives after it is answered
    after at most one more of its pieces, long before the big one is done."""
    async def scenario():
        recorder = Recorder()
        batcher = Batcher(lambda texts: recorder.predict(texts), max_batch=2, max_wait=0)
        recorder.hold.set()
        big = asyncio.create_task(batcher.submit([f"big {i}" for i in range(20)]))
        assert await asyncio.to_thread(recorder.running.wait, 10)  # the big request's first piece is running
        small = asyncio.create_task(batcher.submit(["small"]))
        await asyncio.sleep(0.05)
        recorder.hold.clear()
        small = await small
        done_first = not big.done()
        await big
        await batcher.stop()
        return recorder.calls, small, done_first

    calls, small, done_first = asyncio.run(scenario())
    assert all(len(texts) <= 2 for texts in calls), calls
    assert small[0]["n_tokens"] == 3 and done_first
    assert any("small" in texts for texts in calls[:3]), calls


def test_the_work_of_a_client_that_went_away_is_dropped():
    recorder = Recorder()
    app = build_app(recorder, max_batch=1, max_wait_ms=0)
    with running(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        recorder.hold.set()
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.post, "/predict", json={"text": "first"})
            assert recorder.running.wait(10)  # the worker is busy with "first"
            host, port = url.removeprefix("http://").split(":")
            body = json.dumps({"texts": ["gone one", "gone two"]}).encode()
            with socket.create_connection((host, int(port))) as raw:  # a client that sends and hangs up
                raw.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                time.sleep(0.5)  # its texts are in line
            time.sleep(0.2)
            recorder.hold.clear()
            assert first.result().status_code == 200
        assert client.post("/predict", json={"text": "last"}).status_code == 200
    assert recorder.calls == [["first"], ["last"]]
    assert app.state.batcher.dropped == 1


def test_a_server_fault_is_a_json_500(caplog):
    class Broken(Recorder):
        def predict(self, texts, batch_size=16):
            raise RuntimeError("out of memory, say")

    with TestClient(build_app(Broken())) as client:
        response = client.post("/predict", json={"text": "fine"})
    assert (response.status_code, response.json()) == (500, {"error": SERVER_FAULT})
    assert "out of memory, say" in caplog.text, "the traceback goes to the server's log"
