"""Drop-in for WeNet's ``wenet.utils.train_utils.init_dataset_and_dataloader``.

In WeNet's ``train.py`` change one import::

    # from wenet.utils.train_utils import init_dataset_and_dataloader
    from wenet_lhotse.wenet_compat import init_dataset_and_dataloader

Same signature, same return value ``(train_dataset, cv_dataset, train_data_loader,
cv_data_loader)``, same side effect ``configs['vocab_size'] = tokenizer.vocab_size()``.
The yaml's ``dataset_conf`` is read unchanged (see
:mod:`wenet_lhotse.loader.config` for how ``batch_conf`` becomes a duration budget),
plus an optional ``dataset_conf.lhotse_conf`` section.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, MutableMapping, Tuple

from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.distributed import world_info
from wenet_lhotse.sources import SourceSpec, detect_source_type

logger = logging.getLogger(__name__)

#: ``--data_type`` values: WeNet's ``raw``/``shard`` plus ours.
DATA_TYPES = {"raw": "raw", "shard": "shard", "lhotse": "cuts", "cuts": "cuts", "shar": "shar",
              "auto": "auto"}


def _sources(path: Any, data_type: str) -> List[Any]:
    if data_type not in DATA_TYPES:
        raise ValueError(f"unknown data_type {data_type!r}; use one of {sorted(DATA_TYPES)}")
    kind = DATA_TYPES[data_type]
    # WeNet's train.py only accepts --data_type raw|shard; a Shar directory or a Lhotse
    # cuts manifest given with either is recognised from the path instead.
    if kind in ("raw", "shard") and detect_source_type(str(path)) in ("cuts", "shar"):
        kind = "auto"
    return [SourceSpec(path=str(path), type=kind)]


def cv_dataset_conf(train_conf: Mapping[str, Any]) -> Dict[str, Any]:
    """WeNet's cv conf: the train conf without augmentation and shuffling."""
    conf = dict(train_conf)
    conf.update({"speed_perturb": False, "spec_aug": False, "spec_sub": False,
                 "spec_trim": False, "shuffle": False, "list_shuffle": False, "cycle": 1})
    return conf


def init_dataset_and_dataloader(args: Any, configs: MutableMapping[str, Any], tokenizer: Any,
                                seed: int = 777) -> Tuple[Any, Any, Any, Any]:
    """WeNet's loader factory, on Lhotse.

    :param args: WeNet's argparse namespace: ``train_data``, ``cv_data``, ``data_type``
        (``raw`` | ``shard``, or ``lhotse``/``cuts`` | ``shar`` | ``auto``),
        ``num_workers``, ``pin_memory``, ``prefetch``. Missing attributes take WeNet's
        defaults. ``dataset_conf.lhotse_conf.sources`` / ``cv_sources``, when given,
        replace ``train_data`` / ``cv_data``.
    :param configs: the parsed yaml; ``configs['vocab_size']`` is set.
    :param tokenizer: WeNet's or ours: anything with ``tokenize(line)`` and ``vocab_size()``.
    :param seed: integer seed for sampling (ranks must agree).
    """
    if not callable(getattr(tokenizer, "vocab_size", None)) or \
            not callable(getattr(tokenizer, "tokenize", None)):
        raise TypeError("tokenizer needs WeNet's tokenize(line) and vocab_size()")
    configs["vocab_size"] = tokenizer.vocab_size()
    train_conf = dict(configs.get("dataset_conf") or {})
    lconf = dict(train_conf.get("lhotse_conf") or {})
    data_type = getattr(args, "data_type", "raw") or "raw"
    train_sources = lconf.get("sources") or _sources(args.train_data, data_type)
    cv_sources = lconf.get("cv_sources") or _sources(args.cv_data, data_type)
    num_workers = int(getattr(args, "num_workers", 0) or 0)
    common = {
        "num_workers": num_workers,
        "seed": int(seed),
        "pin_memory": bool(getattr(args, "pin_memory", False)),
        "prefetch_factor": int(getattr(args, "prefetch", 2) or 2) if num_workers > 0 else None,
    }
    train_dataset, train_loader = build_dataloader(train_sources, tokenizer, train_conf,
                                                   "train", **common)
    # WeNet's executor.cv reports the loss of what its rank read and does not combine
    # ranks, so under this drop-in every rank evaluates the whole cv set, as in WeNet,
    # unless lhotse_conf.cv_partition is set (then combine with reduce_cv_loss).
    cv_conf = cv_dataset_conf(train_conf)
    cv_conf["lhotse_conf"] = {**lconf, "cv_partition": bool(lconf.get("cv_partition", False))}
    cv_dataset, cv_loader = build_dataloader(cv_sources, tokenizer, cv_conf, "cv", **common)
    if cv_conf["lhotse_conf"]["cv_partition"] and world_info()[0] > 1:
        logger.info("the cv set is split across ranks: combine each rank's loss sum and "
                    "count with wenet_lhotse.loader.reduce_cv_loss")
    return train_dataset, cv_dataset, train_loader, cv_loader
