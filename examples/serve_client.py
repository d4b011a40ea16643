"""Ask a running `longbert serve` for predictions, with Python's standard library only (no client package).

    pip install -e ".[serve]"   (from the folder of this repository)
    longbert serve runs/examples/train_and_predict     # in one terminal: a model folder or a run folder
    python examples/serve_client.py                    # in another; --url for a server elsewhere

The server answers GET /health with its model and labels, and POST /predict with {"text": "..."} (one prediction) or
{"texts": [...]} ({"predictions": [one per text, in order]}). A bad request gets a 4xx status and {"error": "..."}.
"""
import argparse
import json
import urllib.error
import urllib.request


def call(url: str, body: dict | None = None) -> dict:
    """GET `url` (no body) or POST `body` to it as JSON; the JSON answer. An error answer raises SystemExit."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as error:  # the server answered, with {"error": "one line"}
        raise SystemExit(f"error: {url} answered {error.code}: {json.load(error).get('error')}") from None
    except urllib.error.URLError as error:  # nothing answered
        raise SystemExit(f"error: no server at {url} ({error.reason}); start one with `longbert serve MODEL`") from None


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--url", default="http://127.0.0.1:8000", help="where `longbert serve` listens")
args = parser.parse_args()

health = call(f"{args.url}/health")
print(f"server: {health['model']} ({health['backend']}), labels {', '.join(health['labels'])}")

texts = ["A wonderful film. " + "The story opens in a small harbour town. " * 60 + "I would gladly see it again.",
         "A dull, tiresome film. " + "The brothers argue about the family boat. " * 60]
# Many texts in one request are batched together on the server; one text: {"text": "..."} gives one row.
answer = call(f"{args.url}/predict", {"texts": texts})
for text, row in zip(texts, answer["predictions"]):
    probabilities = ", ".join(f"{name} {p:.3f}" for name, p in row["probabilities"].items())
    label = row["label"] if "label" in row else ", ".join(row["labels"])  # a multi-label model gives "labels"
    print(f"{label}  ({probabilities})  {row['n_tokens']} tokens: {text[:50]}...")
