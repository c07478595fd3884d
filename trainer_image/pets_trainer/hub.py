"""Pretrained weights from the Hugging Face Hub, the way timm gets them, fetched once per node.

timm's pretrained config names the Hub repository of a model's default weights
(`timm/resnet50d.ra2_in1k` for `resnet50d`); timm then downloads `model.safetensors` (else
`pytorch_model.bin`) with `huggingface_hub.hf_hub_download`. `pets-train` does the same before
`accelerate launch` starts the workers, so a node downloads once, into the Hub cache
(`HF_HOME`, on the node's cache volume), and the workers load the file it returns. The usual
Hub variables apply: `HF_ENDPOINT` (a mirror), `HF_TOKEN` (never printed), `HF_HUB_OFFLINE=1`
(a pre-filled cache, nothing fetched).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from .errors import TrainerError

# timm's own order (timm.models._hub.load_state_dict_from_hf): safetensors first.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
PROGRESS_INTERVAL = 2.0


class ModelUnavailable(TrainerError):
    """The weights cannot be had: the message names the repository or URL and why."""

    reason = "ModelUnavailable"  # the job's failure reason (pets_api.phases.FAILURE_REASONS)

    def __init__(self, message: str):
        super().__init__(f"{self.reason}: {message}")


def hub_repository(model: str) -> str:
    """The Hub repository timm loads `model`'s pretrained weights from."""
    import timm

    if not timm.is_model(model):
        raise ModelUnavailable(f"unknown timm model {model!r} (see timm.list_models())")
    config = timm.models.get_pretrained_cfg(model)
    repository = getattr(config, "hf_hub_id", None) if config is not None else None
    if not repository:
        raise ModelUnavailable(f"timm names no Hugging Face Hub weights for {model!r}; set pretrainedWeights to a file")
    return repository


def not_fetched_reason(error: BaseException, offline: bool) -> str:
    """Why a file that is not in the cache was not fetched: offline mode, else the failed Hub request's
    error (huggingface_hub chains it, e.g. the connection error after its retries, to LocalEntryNotFoundError)."""
    if offline:
        return "HF_HUB_OFFLINE is set, so nothing is downloaded"
    cause = error.__cause__ or error
    text = " ".join(str(cause).split()) or "(no message)"
    return f"the Hub request failed: {type(cause).__name__}: {text}"


def _watch_progress(cache_dir: Path, total: int | None, report: Callable[[int, int | None], None],
                    stop: threading.Event) -> None:
    """hf_hub_download has no byte callback: report the size of its `.incomplete` blob instead."""
    while not stop.wait(PROGRESS_INTERVAL):
        partial = list(cache_dir.rglob("*.incomplete"))
        if partial:
            report(sum(path.stat().st_size for path in partial if path.exists()), total)


def fetch_weights(model: str, cache_dir: str | None = None,
                  progress: Callable[[int, int | None], None] | None = None) -> Path:
    """The local path of `model`'s pretrained weights, downloaded unless the cache has them."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repository = hub_repository(model)
    where = f"{constants.ENDPOINT}/{repository}"
    missing, not_cached, reasons = [], [], []
    for filename in WEIGHT_FILES:
        total = None
        if progress and not constants.HF_HUB_OFFLINE:
            try:
                total = get_hf_file_metadata(hf_hub_url(repository, filename)).size
            except EntryNotFoundError:
                missing.append(filename)
                continue
            except Exception:  # noqa: BLE001 (the download below reports the real error)
                total = None
        stop = threading.Event()
        watcher = None
        if progress:
            root = Path(cache_dir or constants.HF_HUB_CACHE)
            watcher = threading.Thread(target=_watch_progress, args=(root, total, progress, stop), daemon=True)
            watcher.start()
        try:
            path = Path(hf_hub_download(repository, filename, cache_dir=cache_dir))
        except LocalEntryNotFoundError as error:  # (a subclass of EntryNotFoundError: caught first)
            not_cached.append(filename)
            reason = not_fetched_reason(error, constants.HF_HUB_OFFLINE)
            if reason not in reasons:
                reasons.append(reason)
            continue
        except EntryNotFoundError:
            missing.append(filename)
            continue
        except GatedRepoError:
            raise ModelUnavailable(f"{where}: gated repository; set spec.hub.tokenSecret to a token with access") from None
        except RepositoryNotFoundError:
            raise ModelUnavailable(f"{where}: no such repository (or it is private and no token was given)") from None
        except RevisionNotFoundError as error:
            raise ModelUnavailable(f"{where}: {error}") from None
        except OSError as error:
            raise ModelUnavailable(f"{where}/{filename}: {error}") from None
        finally:
            stop.set()
            if watcher:
                watcher.join()
        if progress:
            size = path.stat().st_size
            progress(size, size)
        return path
    if not_cached:
        raise ModelUnavailable(
            f"{where}: {' / '.join(not_cached)} not in the cache ({cache_dir or constants.HF_HUB_CACHE}) and "
            + "; ".join(reasons))
    raise ModelUnavailable(f"{where}: has none of {', '.join(missing)}")
