"""A saved longbert model is a Hugging Face model: transformers' Auto classes and pipeline load it and classify whole
documents exactly as `predict` does; it carries a model card; the folder is self-contained (it can be moved, its
backbone's source deleted); it loads from the hub's cache by id and pushes to the hub (huggingface_hub mocked)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import longbert
from helpers import build_model
from longbert.errors import LongbertError
from longbert.hf import hook as hf_hook
from longbert.hf.model import LongbertForSequenceClassification
from longbert.modeling.backbone import portable_reference
from longbert.modeling.card import describe_data, portable
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.hf_config import LongbertConfig

pytestmark = pytest.mark.heavy  # saves, loads and pipelines models: left out of the 1-minute subset

ROOT = Path(__file__).resolve().parents[1]
LONG_TEXT = "A wonderful film with a moving story, fine acting and a score I still hum days later. " * 25
SHORT_TEXT = "Dull and far too long."


def perturbed(model):
    """The model with every trainable weight moved away from its initial value (as training would)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.fixture(scope="module")
def saved(tiny_backbone_dir, tmp_path_factory):
    """One saved model per fine-tuning mode (chunk with an attention pooler), and what each predicted before saving."""
    root = tmp_path_factory.mktemp("hf")
    predictions = {}
    for finetune in ("full", "lora", "frozen"):
        overrides = [f"model.finetune={finetune}", "strategy.pooling=attention"]
        model = perturbed(build_model(tiny_backbone_dir, "chunk", overrides))
        predictions[finetune] = model.predict([LONG_TEXT, SHORT_TEXT])
        model.save_pretrained(root / finetune)
    return root, predictions


def run_python(code: str, env: dict | None = None) -> str:
    """Run `code` in a fresh interpreter (this checkout first on the path); its stdout. Registration must not have
    failed there (a failure is only a warning)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not register" not in done.stderr, done.stderr[-3000:]
    return done.stdout


# Where CUDA is, the pipeline runs the model there, in bf16 (precision auto), while the rows it is held to were
# predicted on the CPU in fp32: bf16 moves a probability by up to about 1e-2.
PIPELINE_ABS = 2e-2 if torch.cuda.is_available() else 1e-5


def assert_same_predictions(got: list[dict], want: list[dict]) -> None:
    """Two lists of `predict` rows: the same labels and lengths, probabilities within 1e-5."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a["label"], a["n_tokens"]) == (b["label"], b["n_tokens"])
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)


def probabilities_of(pipeline_output: list[dict]) -> dict:
    return {row["label"]: row["score"] for row in pipeline_output}


# -- registration ---------------------------------------------------------------------------------------------------

CHECK_REGISTERED = """
from transformers import AutoConfig, AutoModelForSequenceClassification
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
config_class = CONFIG_MAPPING["longbert"]
print(config_class.__name__, AutoModelForSequenceClassification._model_mapping[config_class].__name__)
"""


def test_import_longbert_loads_nothing_heavy_and_registers_when_transformers_loads():
    """`import longbert` loads neither torch nor transformers; the commands' modules, which do, load no optional
    extra (export's, serve's, OpenVINO's) until a command asks; and longbert registers once transformers loads. One
    interpreter for the three: each fresh one costs seconds of the suite."""
    out = run_python("import sys, longbert\n"
                     "print(sorted(m for m in ('torch', 'transformers', 'longbert.hf.model', "
                     "'longbert.modeling.hf_config') if m in sys.modules))\n"
                     "import longbert.cli, longbert.inference.export, longbert.inference.exported, "
                     "longbert.inference.serve, longbert.inference.explain, longbert.inference.predict\n"
                     "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                     "('onnx', 'onnxruntime', 'onnxscript', 'fastapi', 'uvicorn', 'starlette', 'openvino')))\n"
                     + CHECK_REGISTERED)
    assert out.splitlines() == ["[]", "[]", "LongbertConfig LongbertForSequenceClassification"]


def test_registration_when_transformers_was_loaded_before_longbert():
    out = run_python("import transformers.modeling_utils\nfrom transformers import AutoModelForSequenceClassification\n"
                     "import longbert\n" + CHECK_REGISTERED)
    assert out.splitlines() == ["LongbertConfig LongbertForSequenceClassification"]


def test_a_registration_that_fails_is_a_warning_not_a_broken_import():
    with pytest.warns(UserWarning, match=r"longbert could not register its models with transformers' Auto classes "
                                         r"\(longbert\.no_such_module: ModuleNotFoundError"):
        hf_hook.register("longbert.no_such_module")


# -- transformers' Auto classes and pipeline reproduce predict ------------------------------------------------------

@pytest.mark.parametrize("finetune", ["full", "lora", "frozen"])
def test_auto_classes_and_pipeline_classify_whole_documents_as_predict_does(finetune, saved):
    from transformers import AutoConfig, AutoModelForSequenceClassification, pipeline

    root, before_saving = saved
    folder = root / finetune
    config = AutoConfig.from_pretrained(folder)
    assert isinstance(config, LongbertConfig) and config.id2label == {0: "neg", 1: "pos"}
    assert config.problem_type == "single_label_classification"
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    assert isinstance(model, LongbertForSequenceClassification) and not model.training

    expected = before_saving[finetune]
    assert expected[0]["n_tokens"] > 128, "the document is longer than the tiny backbone's 128 positions"
    assert_same_predictions(LongDocumentClassifier.from_pretrained(folder).predict([LONG_TEXT, SHORT_TEXT]), expected)

    classify = pipeline("text-classification", model=str(folder), top_k=None)
    assert len(classify.tokenizer(LONG_TEXT)["input_ids"]) == expected[0]["n_tokens"], "the pipeline does not truncate"
    one_by_one = [classify([text])[0] for text in (LONG_TEXT, SHORT_TEXT)]
    batched = classify([LONG_TEXT, SHORT_TEXT], batch_size=2)  # padded to the longest: padding must not count
    for outputs in (one_by_one, batched):
        for got, want in zip(outputs, expected):
            assert probabilities_of(got) == pytest.approx(want["probabilities"], abs=PIPELINE_ABS)
            assert got[0]["label"] == want["label"]
    label_only = pipeline("text-classification", model=str(folder))(LONG_TEXT)
    assert label_only[0]["label"] == expected[0]["label"]


def test_forward_drops_special_tokens_and_padding_on_either_side_and_gives_the_loss(saved):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = saved[0] / "full"
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = [LONG_TEXT, SHORT_TEXT]
    logits = {}
    for side in ("right", "left"):
        tokenizer.padding_side = side
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits[side] = model(**batch).logits
    content, _ = model.classifier.tokenize(texts)
    stripped = model.documents(batch["input_ids"], batch["attention_mask"])
    assert all(torch.equal(a, b) for a, b in zip(stripped, content))
    assert torch.allclose(logits["left"], logits["right"], atol=1e-5)

    batch = tokenizer(texts, padding=True, return_tensors="pt")
    labels = torch.tensor([1, 0])
    out = model(**batch, labels=labels)
    assert out.loss.item() == pytest.approx(model.classifier.loss(out.logits, labels).item())


def test_multi_label_models_give_sigmoid_scores_in_the_pipeline(tiny_backbone_dir, tmp_path):
    from transformers import AutoConfig, pipeline

    model = perturbed(build_model(tiny_backbone_dir, "sliding", ["model.problem_type=multi_label"],
                                  labels=("x", "y", "z")))
    expected = model.predict([LONG_TEXT])[0]["probabilities"]
    model.save_pretrained(tmp_path / "m")
    assert AutoConfig.from_pretrained(tmp_path / "m").problem_type == "multi_label_classification"
    got = pipeline("text-classification", model=str(tmp_path / "m"), top_k=None)([LONG_TEXT])[0]
    assert probabilities_of(got) == pytest.approx(expected, abs=PIPELINE_ABS)
    assert sum(expected.values()) != pytest.approx(1.0, abs=1e-3), "independent probabilities, not a softmax"


# -- the user errors of the transformers side -----------------------------------------------------------------------

def test_transformers_side_errors_are_one_line(saved, tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    folder = saved[0] / "frozen"
    with pytest.raises(LongbertError, match="cannot be built from a config alone"):
        AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(folder))
    with pytest.raises(LongbertError, match="from_pretrained does not take output_loading_info"):
        AutoModelForSequenceClassification.from_pretrained(folder, output_loading_info=True)
    with pytest.raises(LongbertError, match="dtype must be a torch dtype or 'auto', got 'float33'"):
        LongbertForSequenceClassification.from_pretrained(folder, dtype="float33")
    with pytest.raises(LongbertError, match="device_map: a longbert model runs on one device"):
        AutoModelForSequenceClassification.from_pretrained(folder, device_map={"classifier": "cpu"})
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype="float32", device_map="cpu")
    with pytest.raises(LongbertError, match=r"document 1 has no tokens besides \[CLS\]/\[SEP\]"):
        model(input_ids=torch.tensor([[101, 2000, 102], [101, 102, 0]]),
              attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]))

    edited = shutil.copytree(folder, tmp_path / "edited")
    config = json.loads((edited / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    (edited / "config.json").write_text(json.dumps(config))
    with pytest.raises(LongbertError, match=r"config.json names the labels \['bad', 'good'\] but longbert_config.json "
                                            r"\['neg', 'pos'\]"):
        AutoModelForSequenceClassification.from_pretrained(edited)


# -- the model card -------------------------------------------------------------------------------------------------

def test_a_trained_models_card_has_its_settings_data_metrics_and_command(tiny_recipe, tiny_backbone_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    command = f"longbert train {tmp_path}/tiny.yaml --set backbone.name={tiny_backbone_dir} --set train.max_steps=4"
    recipe = longbert.load_recipe(None, tiny_recipe + ["name=tiny", "train.max_steps=4"])
    result = longbert.train(recipe, command=command)
    best = result.folder / "best"
    card = (best / "README.md").read_text()
    test = result.metrics["test"]
    facts = json.loads((best / "training.json").read_text())
    assert facts["test"]["accuracy"] == test["accuracy"] and facts["recipe"] == "tiny"

    assert card.startswith("---\nlibrary_name: longbert\npipeline_tag: text-classification\n")
    assert "# tiny\n" in card
    assert "| strategy | `chunk`: window 62, pooling mean, token_pooling cls, unit_weights new_tokens |" in card
    assert ("| backbone | a local model folder, saved in this folder's `backbone/` (bert, 2 layers, "
            "hidden size 32") in card
    assert "| fine-tuning | full: every weight of the backbone was trained |" in card
    assert "| labels | `neg`, `pos` |" in card
    assert "| longest document read | 400 tokens;" in card
    assert "documents from imdb-slice0 (a local folder)" in card
    assert f"| train | {result.metrics['data']['train']['documents']} |" in card
    validation = next(e for e in result.metrics["validation_history"] if e["step"] == result.metrics["best_step"])
    assert (f"Validation, at the kept step {validation['step']} (best {result.metrics['best_metric']}): accuracy "
            f"{validation['accuracy']:.1%}, macro_f1 {validation['macro_f1']:.3f}") in card
    assert f"Test ({test['documents']} documents):" in card
    assert f"| {test['accuracy']:.1%} | {test['macro_f1']:.3f} |" in card
    for bucket, row in test["by_length"].items():
        value = "n/a" if row["accuracy"] is None else f"{row['accuracy']:.1%}"
        assert f"| {bucket} | {row['documents']} | {value} |" in card
    assert ("## Training command\n\n```bash\nlongbert train .../tiny.yaml --set backbone.name=.../tiny-bert0 "
            "--set train.max_steps=4\n```") in card
    assert "## Training data\n" in card and "first member" not in card
    assert "## Intended use and limits" in card
    assert str(tmp_path) not in card and tiny_backbone_dir not in card

    # The run's best/ is what transformers loads; a model loaded and saved again keeps its card.
    assert isinstance(AutoModelForSequenceClassification.from_pretrained(best).classifier, LongDocumentClassifier)
    LongDocumentClassifier.from_pretrained(result.folder).save_pretrained(tmp_path / "again")
    assert (tmp_path / "again" / "README.md").read_text() == card


def test_card_of_a_model_not_trained_by_longbert_train(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "sliding", ["model.finetune=lora", "model.problem_type=multi_label"],
                        labels=("x", "y"))
    model.settings.thresholds = [0.4, 0.6]
    model.save_pretrained(tmp_path / "m")
    card = (tmp_path / "m" / "README.md").read_text()
    assert "# longbert sliding classifier" in card and "| strategy | `sliding`: window 40, stride 20," in card
    assert "LoRA (r 8, alpha 16, dropout 0.0, on the attention query/value projections)" in card
    assert "multi-label: each label is given when its probability reaches its threshold (x 0.40, y 0.60)" in card
    assert "## Results" not in card and "## Training command" not in card
    assert not (tmp_path / "m" / "training.json").exists()


def test_paths_are_shown_by_their_last_part():
    assert portable("longbert train /home/me/r.yaml --set data.path=/data/imdb/ --set x=~/m") == \
        "longbert train .../r.yaml --set data.path=.../imdb --set x=.../m"
    assert portable("longbert train imdb_quick --set strategy.window=40") == \
        "longbert train imdb_quick --set strategy.window=40"
    assert describe_data("/nowhere/corpus.jsonl") == "corpus.jsonl (a local file)"
    assert describe_data("imdb") == "imdb"


def test_damaged_training_facts_are_one_clear_error(saved, tmp_path):
    folder = shutil.copytree(saved[0] / "full", tmp_path / "m")
    (folder / "training.json").write_text('{"recipe": "x", "surprise": 1}')
    with pytest.raises(LongbertError, match=r"training.json is damaged: it must be a JSON object with the keys"):
        LongDocumentClassifier.from_pretrained(folder)
    (folder / "training.json").write_text("{cut")
    with pytest.raises(LongbertError, match=r"training.json is damaged: Expecting"):
        LongDocumentClassifier.from_pretrained(folder)


# -- self-contained folders -----------------------------------------------------------------------------------------

# An absolute path as a JSON string: '/x/...', '~/x', 'C:\\x\\' (a vocabulary's '/' and '~' tokens are not paths).
ABSOLUTE = re.compile(r'"(?:~|[A-Za-z]:)?(?:/|\\\\)[^"/\\]+(?:/|\\\\)')


def text_files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".json", ".md", ".txt", ".yaml")}


def assert_no_machine_paths(folder: Path, *paths: str) -> None:
    for name, text in text_files(folder).items():
        for path in (*paths, "site-packages", sys.prefix):
            assert path not in text, f"{name} holds {path}"
        assert not ABSOLUTE.search(text), f"{name} holds an absolute path: {ABSOLUTE.search(text)}"


@pytest.mark.parametrize("finetune", ["full", "lora", "frozen"])
def test_a_folder_moved_away_from_a_deleted_backbone_predicts_the_same(finetune, tiny_backbone_dir, tmp_path):
    backbone = shutil.copytree(tiny_backbone_dir, tmp_path / "backbones" / "tiny")
    model = perturbed(build_model(str(backbone), "sliding", [f"model.finetune={finetune}"]))
    expected = model.predict([LONG_TEXT, SHORT_TEXT])
    model.save_pretrained(tmp_path / "trained" / "m")
    assert_no_machine_paths(tmp_path / "trained" / "m", str(tmp_path))
    settings = json.loads((tmp_path / "trained" / "m" / "longbert_config.json").read_text())
    assert settings["backbone"] == "backbone/"
    if finetune == "lora":
        adapter = json.loads((tmp_path / "trained" / "m" / "adapter" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] is None
        assert not (tmp_path / "trained" / "m" / "adapter" / "README.md").exists(), \
            "peft's template card names the path"

    shutil.rmtree(tmp_path / "backbones")
    moved = shutil.move(tmp_path / "trained" / "m", tmp_path / "elsewhere")
    shutil.rmtree(tmp_path / "trained")
    loaded = LongDocumentClassifier.from_pretrained(moved)
    assert_same_predictions(loaded.predict([LONG_TEXT, SHORT_TEXT]), expected)
    loaded.save_pretrained(tmp_path / "resaved")  # a loaded model saves its own backbone/ again
    resaved = LongDocumentClassifier.from_pretrained(tmp_path / "resaved")
    assert_same_predictions(resaved.predict([LONG_TEXT]), expected[:1])


def test_what_a_folder_may_name_instead_of_saving_the_backbone(tmp_path):
    assert portable_reference("minilm") == "minilm"
    assert portable_reference("bert-base-uncased") == "bert-base-uncased"
    assert portable_reference("google/electra-small-discriminator") == "google/electra-small-discriminator"
    for local in (str(tmp_path), "/gone/tiny-bert", "./gone", "backbone/", "a/b/c"):
        assert portable_reference(local) is None, local


def test_a_lora_folder_on_the_packaged_minilm_names_it_instead_of_saving_it(tmp_path):
    model = perturbed(build_model("minilm", "truncate", ["model.finetune=lora", "strategy.max_tokens=128"]))
    expected = model.predict([LONG_TEXT])
    model.save_pretrained(tmp_path / "m")
    assert not (tmp_path / "m" / "backbone").exists()
    assert json.loads((tmp_path / "m" / "longbert_config.json").read_text())["backbone"] == "minilm"
    adapter = json.loads((tmp_path / "m" / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "sentence-transformers/all-MiniLM-L6-v2"
    card = (tmp_path / "m" / "README.md").read_text()
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2\n" in card and "| backbone | `minilm`: " in card
    assert_no_machine_paths(tmp_path / "m", str(tmp_path))
    assert_same_predictions(LongDocumentClassifier.from_pretrained(tmp_path / "m").predict([LONG_TEXT]), expected)


def test_old_folders_without_config_json_or_card_still_load(saved, tmp_path):
    folder = shutil.copytree(saved[0] / "lora", tmp_path / "old")
    for name in ("config.json", "README.md"):
        (folder / name).unlink()
    expected = saved[1]["lora"]
    assert_same_predictions(LongDocumentClassifier.from_pretrained(folder).predict([LONG_TEXT, SHORT_TEXT]), expected)


def test_an_old_frozen_folder_naming_its_backbone_by_path_still_loads(saved, tiny_backbone_dir, tmp_path):
    folder = shutil.copytree(saved[0] / "frozen", tmp_path / "old")
    shutil.rmtree(folder / "backbone")
    settings = json.loads((folder / "longbert_config.json").read_text())
    settings["backbone"] = tiny_backbone_dir  # what longbert wrote before folders were self-contained
    (folder / "longbert_config.json").write_text(json.dumps(settings))
    expected = saved[1]["frozen"]
    assert_same_predictions(LongDocumentClassifier.from_pretrained(folder).predict([LONG_TEXT, SHORT_TEXT]), expected)


def test_a_folder_that_lost_its_saved_backbone_is_one_clear_error(saved, tmp_path):
    folder = shutil.copytree(saved[0] / "frozen", tmp_path / "m")
    shutil.rmtree(folder / "backbone")
    with pytest.raises(LongbertError, match=r"is incomplete: no backbone \(longbert_config.json says the backbone is "
                                            r"saved in the folder\)"):
        LongDocumentClassifier.from_pretrained(folder)


# -- the hub --------------------------------------------------------------------------------------------------------

def cache_repo(cache: Path, repo_id: str, folder: Path, revision: str = "0123456789abcdef0123456789abcdef01234567"):
    """Lay `folder` out in a huggingface_hub cache as repository `repo_id` at `revision`, main pointing there."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)


HUB_LOAD = """
import json, longbert
from pathlib import Path
from transformers import AutoModelForSequenceClassification, pipeline
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.inference.predict import predict_file
texts = {texts!r}
out = {{"longbert": [r["probabilities"]
                     for r in LongDocumentClassifier.from_pretrained("someone/long-model").predict(texts)],
       "auto": type(AutoModelForSequenceClassification.from_pretrained("someone/long-model")).__name__,
       "pipeline": [{{r["label"]: r["score"] for r in rows}}
                    for rows in pipeline("text-classification", model="someone/long-model", top_k=None)(texts)],
       "predict_file": predict_file("someone/long-model", {source!r}, Path({output!r})).documents}}
out["predict_file"] = [json.loads(line)["probabilities"] for line in Path({output!r}).read_text().splitlines()]
import sys
sys.path.insert(0, "tests")
from helpers import build_model
model = build_model("someone/tiny-bert", "chunk", ["model.finetune=lora"])  # a backbone from the hub (its cache)
model.save_pretrained({saved_to!r})
out["hub_backbone"] = {{"predictions": [r["probabilities"] for r in model.predict(texts)],
                       "reloaded": [r["probabilities"]
                                    for r in LongDocumentClassifier.from_pretrained({saved_to!r}).predict(texts)]}}
try:
    LongDocumentClassifier.from_pretrained("someone/missing-model")
except longbert.LongbertError as error:
    out["missing"] = str(error)
print(json.dumps(out))
"""


def test_a_model_loads_by_hub_id_from_the_offline_cache(saved, tiny_backbone_dir, tmp_path):
    cache = tmp_path / "hub"
    cache_repo(cache, "someone/long-model", saved[0] / "lora")
    cache_repo(cache, "someone/tiny-bert", Path(tiny_backbone_dir))
    source = tmp_path / "texts.txt"
    source.write_text(f"{LONG_TEXT}\n{SHORT_TEXT}\n")
    script = HUB_LOAD.format(texts=[LONG_TEXT, SHORT_TEXT], source=str(source),
                             output=str(tmp_path / "predictions.jsonl"), saved_to=str(tmp_path / "m"))
    out = json.loads(run_python(script, env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}))
    expected = [row["probabilities"] for row in saved[1]["lora"]]
    assert out["auto"] == "LongbertForSequenceClassification"
    for name in ("longbert", "pipeline", "predict_file"):
        for got, want in zip(out[name], expected, strict=True):
            assert got == pytest.approx(want, abs=1e-5), name
    # A LoRA model on a hub backbone names it by its id and does not save its weights.
    hub_backbone = out["hub_backbone"]
    for got, want in zip(hub_backbone["reloaded"], hub_backbone["predictions"], strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    assert not (tmp_path / "m" / "backbone").exists()
    assert json.loads((tmp_path / "m" / "longbert_config.json").read_text())["backbone"] == "someone/tiny-bert"
    adapter = json.loads((tmp_path / "m" / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "someone/tiny-bert"
    assert "base_model: someone/tiny-bert\n" in (tmp_path / "m" / "README.md").read_text()
    assert out["missing"].startswith("'someone/missing-model' is not a local model folder and the hub could not "
                                     "provide it (offline, unreachable, or no such repository")


def test_a_hub_id_missing_from_the_cache_is_one_clear_error(tmp_path):
    with pytest.raises(LongbertError, match=r"^'nobody/nothing' is not a local model folder and the hub could not "
                                            r"provide it \(") as error:
        LongDocumentClassifier.from_pretrained("nobody/nothing", cache_dir=tmp_path, local_files_only=True)
    assert "\n" not in str(error.value)
    with pytest.raises(LongbertError, match=r"^gone/model/folder is not a longbert model folder"):
        LongDocumentClassifier.from_pretrained("gone/model/folder")  # not a hub id: a path that does not exist


class FakeHub:
    """Stands in for huggingface_hub.HfApi: records what would be created and uploaded (files read at upload time,
    while the staged folder still exists)."""

    calls: list = []
    uploaded: dict = {}
    fail_with: Exception | None = None

    def __init__(self, token=None):
        FakeHub.calls.append(("HfApi", token))

    def create_repo(self, repo_id, private=None, exist_ok=False):
        if FakeHub.fail_with is not None:
            raise FakeHub.fail_with
        FakeHub.calls.append(("create_repo", repo_id, private, exist_ok))

    def upload_folder(self, repo_id, folder_path, revision=None, create_pr=False, commit_message=None):
        FakeHub.calls.append(("upload_folder", repo_id, commit_message))
        folder = Path(folder_path)
        FakeHub.uploaded = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        FakeHub.texts = text_files(folder)
        return f"https://huggingface.co/{repo_id}/commit/abc"


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    FakeHub.calls, FakeHub.uploaded, FakeHub.fail_with = [], {}, None
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    return FakeHub


def test_push_to_hub_uploads_the_self_contained_folder(fake_hub, tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk", ["model.finetune=lora"])
    assert model.push_to_hub("me/long-model", private=True, token="hf_x") == "https://huggingface.co/me/long-model/commit/abc"
    assert fake_hub.calls == [("HfApi", "hf_x"), ("create_repo", "me/long-model", True, True),
                              ("upload_folder", "me/long-model", "Upload longbert chunk model")]
    files = set(fake_hub.uploaded)
    assert {"README.md", "config.json", "longbert_config.json", "head.safetensors", "tokenizer.json",
            "tokenizer_config.json", "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
            "backbone/config.json", "backbone/model.safetensors"} <= files
    assert json.loads(fake_hub.uploaded["config.json"])["model_type"] == "longbert"
    assert b"## Intended use and limits" in fake_hub.uploaded["README.md"]
    for name, text in fake_hub.texts.items():
        assert tiny_backbone_dir not in text and "site-packages" not in text, name
    assert not [name for name, text in fake_hub.texts.items() if ABSOLUTE.search(text)]

    # The transformers face pushes the same folder.
    wrapped = LongbertForSequenceClassification.from_classifier(model)
    wrapped.push_to_hub("me/long-model")
    assert fake_hub.calls[-1] == ("upload_folder", "me/long-model", "Upload longbert chunk model")


def test_push_to_hub_errors_are_one_line(fake_hub, tiny_backbone_dir):
    from huggingface_hub.errors import LocalTokenNotFoundError

    model = build_model(tiny_backbone_dir, "truncate")
    with pytest.raises(LongbertError, match=r"push_to_hub: '/tmp/model' is not a hub repository id \(user/name\)"):
        model.push_to_hub("/tmp/model")
    fake_hub.fail_with = LocalTokenNotFoundError("Token is required (`token=True`), but no token found.\n"
                                                 "Run hf auth login.")
    with pytest.raises(LongbertError, match=r"^could not push to hub repository 'me/m': Token is required .*found\.$"):
        model.push_to_hub("me/m")
