"""The model card's front matter is what the hub reads, built through huggingface_hub's card classes: the base
model's license read from its own card, the dataset when it is a hub id, and a model-index of the run's test results;
and the card says truthfully what loading needs."""

from __future__ import annotations

from huggingface_hub import ModelCard

from helpers import build_model
from longbert.modeling.card import TrainingFacts, backbone_license, training_section


def saved_card(model, folder) -> ModelCard:
    model.save_pretrained(folder)
    return ModelCard.load(folder / "README.md")


def test_the_front_matter_holds_the_license_the_dataset_and_the_test_results(tmp_path):
    # The packaged MiniLM, frozen: the folder names its backbone instead of holding it, so the card can name it too.
    model = build_model("minilm", "chunk", ["model.finetune=frozen"])
    model.training_facts = TrainingFacts(recipe="tiny_run", data="stanfordnlp/imdb",
                                         test={"accuracy": 0.87654, "macro_f1": 0.8701, "documents": 10})
    card = saved_card(model, tmp_path / "model")
    data = card.data.to_dict()
    assert data["license"] == "apache-2.0" and data["datasets"] == ["stanfordnlp/imdb"]
    assert data["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert data["library_name"] == "longbert" and "strategy:chunk" in data["tags"]
    results = {r.metric_type: r for r in card.data.eval_results}
    assert set(results) == {"accuracy", "macro_f1"} and results["accuracy"].metric_value == 0.8765
    assert results["accuracy"].dataset_type == "stanfordnlp/imdb" and results["accuracy"].dataset_split == "test"
    assert card.data.model_name == "tiny_run"
    assert "not published on PyPI" in card.text and "pip install longbert`" not in card.text


def test_a_backbone_folder_with_a_card_gives_its_license(tiny_backbone_dir, tmp_path):
    import shutil

    shutil.copytree(tiny_backbone_dir, tmp_path / "backbone")
    (tmp_path / "backbone" / "README.md").write_text("---\nlicense: mit\n---\n# a tiny BERT\n")
    assert backbone_license(str(tmp_path / "backbone")) == "mit"
    assert backbone_license(str(tiny_backbone_dir)) is None  # no card of its own
    assert backbone_license("backbone/") is None  # a saved model's own copy: its origin is not kept


def test_a_model_without_a_run_or_a_licensed_backbone_claims_neither(tiny_backbone_dir, tmp_path):
    card = saved_card(build_model(tiny_backbone_dir, "chunk"), tmp_path / "model")
    data = card.data.to_dict()
    assert "license" not in data and "datasets" not in data and not card.data.eval_results
    local = build_model(tiny_backbone_dir, "chunk")
    local.training_facts = TrainingFacts(recipe="r", data="imdb (a local folder)", test={"accuracy": 0.5})
    card = saved_card(local, tmp_path / "local")
    assert "datasets" not in card.data.to_dict()  # a local folder's name is no hub dataset
    assert card.data.eval_results[0].dataset_name == "imdb (a local folder)"


def test_an_ensembles_training_headings_say_they_are_its_first_members():
    """An ensemble's card shows its first member's data and training command under headings that say whose they are;
    a plain model's keep theirs."""
    facts = TrainingFacts(recipe="tiny_run", data="imdb", command="longbert train tiny.yaml")
    plain, first = "\n".join(training_section(facts)), "\n".join(training_section(facts, first_member=True))
    assert "## Training data\n" in plain and "## Training command\n\n```bash\nlongbert train tiny.yaml" in plain
    assert "## Training data (the first member's)\n" in first and "## Training command" not in first
    assert "## The first member's training command\n\n```bash\nlongbert train tiny.yaml" in first
