"""Models by Hugging Face id: ``config.json`` (and ``hf_quant_config.json``) from the
local Hugging Face cache, or downloaded alone when allowed. Weights are never fetched:
only these two file names are ever asked for.

Environment, read at each call (as huggingface_hub documents them): ``HF_HUB_OFFLINE``
(no network), ``HF_TOKEN`` (gated repos), ``HF_ENDPOINT`` (a mirror), ``HF_HUB_CACHE`` /
``HF_HOME`` (where the cache is).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sglang_audit.errors import InputError

CONFIG_FILES = ("config.json", "hf_quant_config.json")  # never anything else (no weights)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TRUE = ("1", "ON", "YES", "TRUE")


def looks_like_repo_id(spec: str) -> bool:
    return bool(_REPO_ID.match(spec)) and ".." not in spec and not spec.endswith((".json", "/"))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE or os.environ.get("TRANSFORMERS_OFFLINE", "").upper() in _TRUE


def cache_dir() -> Path:
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_model_dir(repo_id: str, revision: str | None = None) -> tuple[Path | None, bool | None]:
    """(snapshot dir holding config.json, whether hf_quant_config.json is known present:
    True/False, or None when the cache does not say) — or (None, None) when not cached."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir(), revision=revision)
    if not isinstance(found, str):
        return None, None
    quant = try_to_load_from_cache(repo_id, "hf_quant_config.json", cache_dir=cache_dir(), revision=revision)
    has_quant: bool | None = True if isinstance(quant, str) else (None if quant is None else False)
    return Path(found).parent, has_quant


def download_configs(repo_id: str, progress: Callable[[str], None] | None = None,
                     revision: str | None = None) -> Path:
    """Fetch config.json and (if the repo has it) hf_quant_config.json into the HF cache."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT") or None
    token = os.environ.get("HF_TOKEN") or None
    where = endpoint or "huggingface.co"
    if progress:
        progress(f"downloading config.json of {repo_id} from {where} (no weights) ...")
    kw: dict[str, Any] = {"cache_dir": cache_dir(), "revision": revision, "endpoint": endpoint, "token": token}
    try:
        with _quiet_hub():
            path = Path(hf_hub_download(repo_id, "config.json", **kw))
    except LocalEntryNotFoundError as exc:  # no network (a subclass of EntryNotFoundError: first)
        raise InputError(f"model {repo_id}: not in the Hugging Face cache and cannot be downloaded from {where} ({_short(exc)})") from None
    except GatedRepoError:
        raise InputError(f"model {repo_id}: gated repository; set HF_TOKEN to a token with access") from None
    except RepositoryNotFoundError:
        raise InputError(f"model {repo_id}: no such repository on {where} (or private: set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise InputError(f"model {repo_id}: revision {revision!r} not found on {where}") from None
    except EntryNotFoundError:
        raise InputError(f"model {repo_id}: the repository has no config.json") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise InputError(f"model {repo_id}: cannot download config.json from {where}: {_short(exc)}") from None
    try:
        with _quiet_hub():
            hf_hub_download(repo_id, "hf_quant_config.json", **kw)
    except LocalEntryNotFoundError as exc:  # not "absent": unknown, so no answer built on it
        raise InputError(f"model {repo_id}: cannot download hf_quant_config.json from {where} ({_short(exc)})") from None
    except EntryNotFoundError:
        pass  # the repository has none (most have none)
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise InputError(f"model {repo_id}: cannot download hf_quant_config.json from {where}: {_short(exc)}") from None
    return path.parent


@contextmanager
def _quiet_hub() -> Iterator[None]:
    """huggingface_hub logs retries and connection errors on stderr; the tool's own
    message is the one line the user gets."""
    import logging  # with a download only: a local model never needs it

    log = logging.getLogger("huggingface_hub")
    old = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(old)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def locate_repo(repo_id: str, progress: Callable[[str], None] | None = None,
                warn: Callable[[str], None] | None = None) -> Path | None:
    """The local directory with the repo's config files, or None when it is neither
    cached nor downloadable (offline)."""
    snapshot, has_quant = cached_model_dir(repo_id)
    if snapshot is not None:
        if has_quant is None and not offline():
            # the cache does not say whether hf_quant_config.json exists: ask the hub
            return download_configs(repo_id, progress)
        if has_quant is None and warn is not None:
            warn(f"{repo_id}: the Hugging Face cache does not say whether hf_quant_config.json exists "
                 "(HF_HUB_OFFLINE is set); analysed without it")
        return snapshot
    if offline():
        return None
    return download_configs(repo_id, progress)
