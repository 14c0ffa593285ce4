"""Mid-epoch resume under WeNet's own ``train.py``, without editing it.

WeNet's ``--checkpoint X.pt`` restores the model and the step, then replays the epoch
from its start (a step checkpoint's batches are trained again). Under
``python -m wenet_lhotse.dropin.train``, :func:`install` wraps two WeNet functions:

* ``save_model`` (``wenet.utils.train_utils``, and the executor's reference to it): after
  WeNet saves ``<model_dir>/<tag>.pt`` (``epoch_N`` after an epoch, ``step_N`` every
  ``save_interval`` steps), every rank writes its train loader's ``state_dict()`` beside
  it, atomically, as ``<model_dir>/<tag>.loader.rank<R>.pt`` (positions and seeds: a few
  kB, whatever the corpus size);
* ``init_dataset_and_dataloader``: with ``--checkpoint <dir>/<tag>.pt``, each rank loads
  ``<dir>/<tag>.loader.rank<R>.pt`` into the new train loader before WeNet iterates it, so
  training continues with the batch after the checkpoint (an epoch checkpoint: at the
  start of the next epoch, with that epoch's shuffle). The file is read as plain data
  only (:func:`~wenet_lhotse.loader.state_check.read_state_file`: ``weights_only=True``,
  a pickled payload is refused before it runs); a file that is missing, cut short,
  empty, crafted, of other data (a map state: a buffered cut's id is checked at its
  position), mode or world size gives one WARNING line naming it and WeNet's replay,
  never a crash.

Map-style loading (raw lists, cuts, Shar) resumes on any number of ranks (the state is
the same on every rank; rank 0's is used when the world size changed: see
:meth:`~wenet_lhotse.loader.sampler.ResumableBucketingSampler.load_state_dict`) and
DataLoader workers. Streamed tar shards resume on the same number of workers (otherwise
one WARNING and WeNet's replay) and ranks: a streamed epoch saved mid-way on another number
of ranks stops with one error line naming the fix (``wenet-lhotse index`` the shards, which
makes the resume elastic, or resume from an epoch checkpoint), as a replay would train some
utterances never and others several times. ``dataset_conf.lhotse_conf.resume_loader:
false`` keeps WeNet's replay (no state written or read).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from wenet_lhotse.loader.distributed import world_info
from wenet_lhotse.loader.state_check import read_state_file

logger = logging.getLogger(__name__)

#: the train loader of this process (set by the wrapped factory)
_STATE: dict = {"loader": None, "enabled": False}


def loader_state_path(checkpoint: os.PathLike[str] | str, rank: int) -> Path:
    """``<dir>/<tag>.loader.rank<rank>.pt`` for checkpoint ``<dir>/<tag>.pt``."""
    p = Path(checkpoint)
    stem = p.name[:-3] if p.name.endswith(".pt") else p.name
    return p.with_name(f"{stem}.loader.rank{rank}.pt")


def _enabled(configs: Any) -> bool:
    lconf = (configs.get("dataset_conf") or {}).get("lhotse_conf") or {}
    return bool(lconf.get("resume_loader", True))


def save_loader_state(info_dict: Any) -> Optional[Path]:
    """Write the train loader's state beside WeNet's ``<model_dir>/<tag>.pt`` (atomic:
    temp file, then rename). Not for the ``init`` checkpoint (nothing trained yet)."""
    loader = _STATE["loader"]
    tag, model_dir = info_dict.get("tag"), info_dict.get("model_dir")
    if loader is None or not _STATE["enabled"] or not model_dir or tag in (None, "init"):
        return None
    _, rank = world_info()
    path = loader_state_path(Path(model_dir) / f"{tag}.pt", rank)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(loader.state_dict(), tmp)
    os.replace(tmp, path)
    return path


def restore_loader_state(loader: Any, checkpoint: Optional[str]) -> bool:
    """Load the state saved beside ``checkpoint`` into ``loader``; ``False`` (WeNet's
    replay, said in one line) when there is none or it cannot be resumed here."""
    if not checkpoint:
        return False
    ws, rank = world_info()
    path = loader_state_path(checkpoint, rank)
    if not path.exists() and loader_state_path(checkpoint, 0).exists():
        # elastic: a map-style state is the same on every rank; a streamed one is refused
        path = loader_state_path(checkpoint, 0)
    if not path.exists():
        logger.warning("no loader state %s beside the checkpoint: the epoch replays from "
                       "its start (WeNet's behaviour)", path)
        return False
    try:  # read once, as plain data only: a planted payload is refused before it runs
        state = read_state_file(path)
    except Exception as err:  # noqa: BLE001 -- a damaged file replays, whatever broke
        return _replay(path, err)
    if getattr(loader, "mode", "") == "streamed":
        _refuse_streamed_elastic(state, path, ws)  # an error line, not a replay
    try:
        loader.load_state_dict(state)
    except Exception as err:  # noqa: BLE001 -- a state not for this loader replays
        return _replay(path, err)
    logger.info("train loader resumed from %s (rank %d of %d)", path, rank, ws)
    return True


def _replay(path: Path, err: BaseException) -> bool:
    """``False``, after the one WARNING saying why the epoch replays from its start."""
    msg = " ".join(str(err).split()) or type(err).__name__
    logger.warning("loader state %s not resumed (%s): the epoch replays from its start "
                   "(WeNet's behaviour)", path, msg)
    return False


def _refuse_streamed_elastic(sd: Any, path: Path, ws: int) -> None:
    """A streamed epoch saved mid-way on another number of ranks: one error line with the
    fix (replaying it would train some utterances never and others several times)."""
    from wenet_lhotse.errors import WenetDataError
    from wenet_lhotse.loader.dataloader import streamed_elastic_refusal

    saved = int(sd.get("world_size", ws)) if isinstance(sd, dict) else ws
    if saved != ws and (sd.get("per_worker") or {}):
        raise WenetDataError(f"cannot resume the loader: {streamed_elastic_refusal(saved, ws)}",
                             str(path), kind="resume")


def _wrap_factory(factory: Callable[..., Any]) -> Callable[..., Any]:
    def init_dataset_and_dataloader(args: Any, configs: Any, tokenizer: Any,
                                    *a: Any, **kw: Any) -> Any:
        out = factory(args, configs, tokenizer, *a, **kw)
        _STATE["loader"], _STATE["enabled"] = out[2], _enabled(configs)
        if _STATE["enabled"]:
            restore_loader_state(out[2], getattr(args, "checkpoint", None))
        return out

    init_dataset_and_dataloader.__wrapped__ = factory  # type: ignore[attr-defined]
    return init_dataset_and_dataloader


def _wrap_save(save: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(save, "_saves_loader", False):
        return save

    def save_model(model: Any, info_dict: Any) -> Any:
        out = save(model, info_dict)
        save_loader_state(info_dict)
        return out

    save_model._saves_loader = True  # type: ignore[attr-defined]
    return save_model


def install() -> None:
    """Wrap WeNet's ``save_model`` and the (already patched) loader factory; call after
    :func:`wenet_lhotse.dropin.train.patch_wenet`, before ``train.py`` is imported."""
    import importlib

    train_utils = importlib.import_module("wenet.utils.train_utils")
    executor = importlib.import_module("wenet.utils.executor")
    train_utils.init_dataset_and_dataloader = _wrap_factory(
        train_utils.init_dataset_and_dataloader)
    train_utils.save_model = _wrap_save(train_utils.save_model)
    executor.save_model = _wrap_save(executor.save_model)
