"""Resolve a local folder or a Hub repo id to a local folder, with errors that say what to do (offline included)."""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)


def is_offline() -> bool:
    """Offline mode: HF_HUB_OFFLINE set now, or huggingface_hub's own flag (read when it was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes", "on"} or constants.HF_HUB_OFFLINE


def resolve_folder(
    name_or_path: str | os.PathLike, what: str, required: tuple[str, ...], revision: str | None = None, hint: str = ""
) -> Path:
    """Return a local folder holding `required` files for `name_or_path` (a folder, or a Hub id via the HF cache).
    `hint` ends the message when the id is found neither locally nor on the Hub (what else the user can do)."""
    path = Path(name_or_path)
    if path.is_dir():
        folder = path
    elif path.exists():
        raise ValueError(f"{what} location {path} is a file; pass the folder that contains {', '.join(required)}.")
    else:
        folder = _download(str(name_or_path), what, revision, hint)
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a {what}: it lacks {', '.join(missing)}. Pass a folder written by save_pretrained "
            "(or a Hub repo id of one)."
        )
    return folder


def _download(repo_id: str, what: str, revision: str | None, hint: str) -> Path:
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=is_offline()))
    except LocalEntryNotFoundError as err:
        if is_offline() or isinstance(err.__cause__, OfflineModeIsEnabled):
            raise OSError(
                f"{what} {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading "
                f"it. If it is published, download it once with network access (`hf download {repo_id}`); or pass a "
                f"local folder.{hint}"
            ) from err
        # Online, yet huggingface_hub fell back to the cache: the Hub could not be reached (no network, proxy, DNS,
        # timeout, Hub down). The cause is chained to its error.
        cause = err.__cause__ or err
        raise OSError(
            f"{what} {repo_id!r} could not be downloaded: the Hugging Face Hub could not be reached "
            f"({type(cause).__name__}: {cause}), and it is not in the local cache. Check the network connection "
            f"(proxy, HF_ENDPOINT) and retry, or pass a local folder.{hint}"
        ) from err
    except HFValidationError as err:
        raise FileNotFoundError(
            f"{what} {repo_id!r} is neither an existing folder nor a valid Hub repo id.{hint}"
        ) from err
    except RepositoryNotFoundError as err:
        raise OSError(
            f"{what} {repo_id!r} does not exist on the Hub (or is private: log in with `hf auth login`).{hint}"
        ) from err
