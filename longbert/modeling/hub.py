"""Model folders on the Hugging Face hub, through huggingface_hub: a hub id -> the local snapshot of its repository
(huggingface_hub's cache, which also serves HF_HUB_OFFLINE=1), and a model -> a hub repository (`push_to_hub`).
A hub repository holds exactly what `save_pretrained` writes, so a snapshot loads like any model folder."""

from __future__ import annotations

import tempfile
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from longbert import __version__
from longbert.errors import LongbertError, first_line


def is_hub_id(name: str) -> bool:
    """Whether `name` has the shape of a hub repository id ('user/name' or 'name'); a path such as '/data/model',
    './model' or 'a/b/c' does not."""
    if not name or name.startswith(("/", "~", ".")) or "\\" in name:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def download(repo_id: str, revision: str | None = None, cache_dir: str | Path | None = None,
             token: str | bool | None = None, local_files_only: bool = False, force_download: bool = False) -> Path:
    """The local folder of hub model `repo_id` at `revision` (a branch, tag or commit; main by default), downloaded
    into huggingface_hub's cache unless it is there already. Offline (HF_HUB_OFFLINE=1) only the cache is read. One
    LongbertError line when the hub cannot provide it."""
    try:
        return Path(huggingface_hub.snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, token=token,
                                      local_files_only=local_files_only, force_download=force_download,
                                      library_name="longbert", library_version=__version__))
    except (OSError, ValueError) as error:  # not cached while offline, unreachable, no such repository or revision
        raise LongbertError(f"{repo_id!r} is not a local model folder and the hub could not provide it (offline, "
                            f"unreachable, or no such repository: {first_line(error)})") from None


def push_to_hub(model, repo_id: str, private: bool | None = None, token: str | bool | None = None,
                commit_message: str | None = None, revision: str | None = None, create_pr: bool = False):
    """Save `model` (a LongDocumentClassifier) as `save_pretrained` does and upload that folder to hub repository
    `repo_id` (created when it does not exist; `private` applies then). Returns huggingface_hub's CommitInfo (its
    `commit_url`, and `pr_url` with `create_pr`). One LongbertError line when the hub refuses or cannot be reached."""
    if not is_hub_id(repo_id):
        raise LongbertError(f"push_to_hub: {repo_id!r} is not a hub repository id (user/name)")
    api = huggingface_hub.HfApi(token=token)  # looked up at the call: tests put a fake hub in its place
    with tempfile.TemporaryDirectory(prefix="longbert-push-") as staging:
        folder = Path(staging) / "model"
        model.save_pretrained(folder)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            message = commit_message or f"Upload longbert {model.settings.strategy.name} model"
            return api.upload_folder(repo_id=repo_id, folder_path=folder, revision=revision, create_pr=create_pr,
                                     commit_message=message)
        except (OSError, ValueError) as error:  # no token, refused, unreachable, offline
            raise LongbertError(f"could not push to hub repository {repo_id!r}: {first_line(error)}") from None
