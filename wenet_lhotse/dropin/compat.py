"""Drop-in for WeNet's ``wenet.utils.train_utils.init_dataset_and_dataloader``.

In WeNet's ``train.py`` change one import (or run ``python -m wenet_lhotse.dropin.train``,
which does it for you)::

    # from wenet.utils.train_utils import init_dataset_and_dataloader
    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

Same signature, same return value ``(train_dataset, cv_dataset, train_data_loader,
cv_data_loader)``, same side effects (``configs['vocab_size']``, and in step mode --
``save_interval`` in the yaml -- ``configs['dataset_conf']['cycle'] = max_epoch``).

Arguments as WeNet's argparse gives them: ``--train_data`` one or more lists (read one
after another, as WeNet's ``TextLineDataPipe`` does), ``--cv_data`` one list,
``--data_type raw|shard``. A Lhotse Shar directory or cuts manifest passed with either
``data_type`` is recognised from the path.

WeNet's semantics by default (see docs/migration.md for how each was checked against
WeNet's own loader): bad or missing audio is skipped, logged and counted (never a stop
at start-up), every rank evaluates the whole cv set, batches carry ``pcm`` /
``pcm_length``, and under ``--train_engine torch_ddp`` (epoch mode) streamed shards give
each rank all of its tars, with uneven step counts that WeNet's ``model.join()`` absorbs
(:func:`wenet_equal_steps`). Every improvement of ours is an opt-in
``dataset_conf.lhotse_conf`` key; :data:`WENET_LHOTSE_DEFAULTS` are the ``lhotse_conf``
values this drop-in uses where the yaml does not set them.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Sequence, Tuple, Union

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.config_check import check_wenet_configs
from wenet_lhotse.loader.distributed import world_info
from wenet_lhotse.loader.lhotse_conf import LhotseConf
from wenet_lhotse.loader.wenet_dataset import CutTransform, make_wenet_dataset
from wenet_lhotse.sources import SourceSpec, detect_source_type
from wenet_lhotse.sources.detect import WENET_KINDS
from wenet_lhotse.sources.registry import get_kind

logger = logging.getLogger(__name__)

#: ``--data_type`` values WeNet's ``train.py`` / ``recognize.py`` accept.
WENET_DATA_TYPES = WENET_KINDS

#: ``lhotse_conf`` values under this drop-in unless the yaml sets them: WeNet's behaviour
#: (skip bad audio, whole cv set on every rank, pcm in every batch).
WENET_LHOTSE_DEFAULTS: Dict[str, Any] = {
    "fault_tolerant": True,
    "cv_partition": False,
    "return_pcm": True,
}

DataArg = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def wenet_sources(data: DataArg, data_type: str, arg: str = "--train_data") -> List[SourceSpec]:
    """Sources for WeNet's ``--train_data``/``--cv_data``/``--test_data`` value.

    :param data: one path, or the list ``nargs='+'`` gives; several lists are read one
        after another (one source), as WeNet does.
    :param data_type: ``raw`` or ``shard`` (WeNet's choices). Paths that are a Lhotse
        Shar directory or cuts manifest are recognised as such whatever ``data_type`` says.
    :param arg: the argument's name, for error messages.
    """
    if data_type not in WENET_DATA_TYPES:
        raise ValueError(f"--data_type {data_type!r}: WeNet's data types are "
                         f"{' or '.join(WENET_DATA_TYPES)} (Shar directories and cuts "
                         "manifests are recognised from the path)")
    paths = [os.fspath(data)] if isinstance(data, (str, os.PathLike)) else \
        [os.fspath(p) for p in data]
    if not paths:
        raise ValueError(f"{arg}: no data list given")
    kinds = [detect_source_type(p) for p in paths]
    for path, kind in zip(paths, kinds):
        if get_kind(kind).wenet_list_refusal:
            raise ValueError(f"{arg} {path}: {get_kind(kind).wenet_list_refusal}")
    lhotse_kinds = [k for k in kinds if not get_kind(k).wenet]
    if not lhotse_kinds:
        for p in paths:
            check_data_type(p, data_type, arg)
        return [SourceSpec(path=paths if len(paths) > 1 else paths[0], type=data_type)]
    if len(lhotse_kinds) != len(kinds) or len(set(kinds)) > 1:
        raise ValueError(f"{arg}: {paths} mixes kinds ({', '.join(kinds)}); give one kind, "
                         "or list them in dataset_conf.lhotse_conf.sources")
    if get_kind(kinds[0]).single_path:  # e.g. Shar: one directory each, mixed by Lhotse
        return [SourceSpec(path=p, type=kinds[0]) for p in paths]
    return [SourceSpec(path=paths if len(paths) > 1 else paths[0], type=kinds[0])]


def first_line_data_type(path: str) -> Optional[str]:
    """``raw`` or ``shard``: what a local list's first non-empty line looks like (a JSON
    object is a raw ``data.list`` line, a ``.tar``/``.tgz`` path or URL a shard list's);
    ``None`` when it cannot tell (not a local file, or another line)."""
    if "://" in path or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        head = f.read(4096)
    line = next((x.strip() for x in head.splitlines() if x.strip()), b"")
    if line.startswith(b"{"):
        return "raw"
    if line.split(b"?")[0].rstrip(b"/").endswith((b".tar", b".tar.gz", b".tgz")):
        return "shard"
    return None


#: what a list's first line is, by the ``--data_type`` it fits
_FIRST_LINE = {"raw": "a raw data.list line (JSON)", "shard": "a tar shard path"}


def check_data_type(path: str, data_type: str, arg: str) -> None:
    """Stop at start-up, in one line, when a list's first line is of the other
    ``--data_type``: WeNet applies the one ``--data_type`` to ``--train_data`` and
    ``--cv_data`` and would read every raw line as a tar path (a warning per line, a
    whole epoch, then a ``ZeroDivisionError`` in cv), or every tar path as JSON."""
    fits = first_line_data_type(path)
    if fits is None or fits == data_type:
        return
    what = _FIRST_LINE[fits]
    raise WenetDataError(
        f"{arg} has {what}, but --data_type is {data_type}: this list fits --data_type "
        f"{fits} (WeNet reads --train_data and --cv_data with the one --data_type; to keep "
        f"{data_type} for the other list, give this one as dataset_conf.lhotse_conf."
        f"{'cv_sources' if arg == '--cv_data' else 'sources'}: [{{path: {path}, type: "
        f"{fits}}}])", source=path, line=1, kind="data_type")


def wenet_lhotse_conf(dataset_conf: Mapping[str, Any]) -> LhotseConf:
    """The yaml's ``lhotse_conf`` over :data:`WENET_LHOTSE_DEFAULTS`, typed (and checked)."""
    return LhotseConf.from_dict({**WENET_LHOTSE_DEFAULTS,
                                 **dict(dataset_conf.get("lhotse_conf") or {})})


def with_wenet_defaults(dataset_conf: Mapping[str, Any]) -> Dict[str, Any]:
    """``dataset_conf`` whose ``lhotse_conf`` holds :data:`WENET_LHOTSE_DEFAULTS` where
    the yaml does not set them (what every builder of this drop-in reads)."""
    conf = dict(dataset_conf)
    conf["lhotse_conf"] = {**WENET_LHOTSE_DEFAULTS, **dict(conf.get("lhotse_conf") or {})}
    return conf


def wenet_dataset(tokenizer: Any, dataset_conf: Mapping[str, Any], split: str,
                  seed: int = 777) -> Any:
    """Our ``dataset[cuts] -> batch`` for WeNet's ``dataset_conf``, with WeNet's behaviour
    where ours differs by default: ``langs`` from langid (``language_conf``), ``pcm`` in
    every batch, bad audio skipped (unless ``lhotse_conf`` says otherwise)."""
    from wenet_lhotse.dataset.langid import WenetLangId

    return make_wenet_dataset(
        tokenizer, with_wenet_defaults(dataset_conf), split, seed=seed,
        lang_id=WenetLangId.from_wenet_conf(dataset_conf.get("language_conf")).preload())


def wenet_equal_steps(args: Any, configs: Mapping[str, Any]) -> bool:
    """``lhotse_conf.equal_steps`` under WeNet's ``train.py`` unless the yaml sets it.

    ``False`` (every rank trains all of its data, uneven step counts) for
    ``--train_engine torch_ddp`` in epoch mode: WeNet's executor wraps the epoch in
    ``model.join()``, which absorbs uneven ranks, and so trains every utterance once,
    as with WeNet's own loader. ``True`` (every rank stops at the step where the first
    runs out; the rest is counted as left over in the epoch ledger) for ``deepspeed``
    and ``torch_fsdp`` (no ``join``: WeNet's ``wenet_join`` breaks every rank out at a
    ``monitored_barrier`` timeout once one rank is done, dropping the others' rest
    unseen) and in step mode (``save_interval``: the executor calls ``dist.barrier()``
    inside the loop, which uneven ranks would not all reach)."""
    engine = getattr(args, "train_engine", None) or configs.get("train_engine", "torch_ddp")
    return not (engine == "torch_ddp" and "save_interval" not in configs)


def _loader_kw(args: Any, seed: int) -> Dict[str, Any]:
    num_workers = int(getattr(args, "num_workers", 0) or 0)
    return {
        "num_workers": num_workers,
        "seed": int(seed),
        "pin_memory": bool(getattr(args, "pin_memory", False)),
        "prefetch_factor": int(getattr(args, "prefetch", 2) or 2) if num_workers > 0 else None,
    }


def init_dataset_and_dataloader(args: Any, configs: MutableMapping[str, Any], tokenizer: Any,
                                seed: int = 777) -> Tuple[Any, Any, Any, Any]:
    """WeNet's loader factory, on Lhotse.

    :param args: WeNet's argparse namespace: ``train_data`` (a list or a path),
        ``cv_data``, ``data_type`` (``raw`` | ``shard``), ``num_workers``, ``pin_memory``,
        ``prefetch``. Missing attributes take WeNet's defaults.
        ``dataset_conf.lhotse_conf.sources`` / ``cv_sources``, when given, replace
        ``train_data`` / ``cv_data``.
    :param configs: the parsed yaml; ``configs['vocab_size']`` is set, and in step mode
        ``configs['dataset_conf']['cycle']``, as WeNet does.
    :param tokenizer: WeNet's or ours: anything with ``tokenize(line)`` and ``vocab_size()``.
    :param seed: integer seed for sampling (ranks must agree).
    """
    if not callable(getattr(tokenizer, "vocab_size", None)) or \
            not callable(getattr(tokenizer, "tokenize", None)):
        raise TypeError("tokenizer needs WeNet's tokenize(line) and vocab_size()")
    # WeNet's step mode: the data repeated max_epoch times, read as one "epoch"
    if "save_interval" in configs:
        configs.setdefault("dataset_conf", {})
        configs["dataset_conf"]["cycle"] = configs.get("max_epoch", 100)
    # Stop now on a yaml typo or a symbol table that disagrees with special_tokens
    # (WeNet would train on with a default, or an ordinary unit as <sos>/<eos>).
    check_wenet_configs(configs)
    configs["vocab_size"] = tokenizer.vocab_size()
    train_conf = with_wenet_defaults(configs.get("dataset_conf") or {})
    train_conf["lhotse_conf"].setdefault("equal_steps", wenet_equal_steps(args, configs))
    lconf = wenet_lhotse_conf(train_conf)
    data_type = getattr(args, "data_type", "raw") or "raw"
    train_sources = lconf.sources or wenet_sources(args.train_data, data_type)
    cv_sources = lconf.cv_sources or wenet_sources(args.cv_data, data_type, "--cv_data")
    for key, arg, given in (("sources", "--train_data", lconf.sources),
                            ("cv_sources", "--cv_data", lconf.cv_sources)):
        value = getattr(args, arg[2:], None)
        if given and value and world_info()[1] == 0:
            logger.info("dataset_conf.lhotse_conf.%s replaces %s (%s is not read): %s",
                        key, arg, value if isinstance(value, str) else " ".join(value),
                        ", ".join(str(s.get("path", s)) if isinstance(s, dict) else str(s)
                                  for s in given))
    kw = _loader_kw(args, seed)
    train_dataset, train_loader = build_dataloader(
        train_sources, tokenizer, train_conf, "train",
        dataset=wenet_dataset(tokenizer, train_conf, "train", seed), **kw)
    # WeNet's executor.cv reports the loss of what its rank read and does not combine
    # ranks, so every rank evaluates the whole cv set, as in WeNet, unless
    # lhotse_conf.cv_partition is set (then combine with reduce_cv_loss).
    # WeNet's cv conf (init_dataset for split != 'train': no augmentation, shuffling or
    # cycling; dither stays) is the train conf read for split "cv" (dataset.splits).
    cv_dataset, cv_loader = build_dataloader(
        cv_sources, tokenizer, train_conf, "cv",
        dataset=wenet_dataset(tokenizer, train_conf, "cv", seed), **kw)
    if lconf.cv_partition and world_info()[0] > 1:
        logger.info("the cv set is split across ranks: combine each rank's loss sum and "
                    "count with wenet_lhotse.loader.reduce_cv_loss")
    return train_dataset, cv_dataset, train_loader, cv_loader


def Dataset(data_type: str, data_list_file: DataArg, tokenizer: Any = None,  # noqa: N802
            conf: Optional[Mapping[str, Any]] = None, partition: bool = True) -> Any:
    """Drop-in for ``wenet.dataset.dataset.Dataset`` as WeNet's ``recognize.py`` uses it:
    an iterable of WeNet batches for ``DataLoader(dataset, batch_size=None)``.

    Decoding semantics (what recognize.py's ``test_conf`` asks for): the input's order,
    static batches of ``batch_conf.batch_size`` consecutive utterances, no augmentation,
    no dither, WeNet's ``filter_conf`` (recognize.py relaxes it), bad audio skipped.
    ``partition`` is accepted and unused: decoding reads everything once. Training
    goes through :func:`init_dataset_and_dataloader` instead.
    """
    from wenet_lhotse.loader.ordered import OrderedBatches

    conf = dict(conf or {})
    from wenet_lhotse.loader.config_check import check_dataset_conf

    check_dataset_conf(conf)
    batch_conf = dict(conf.get("batch_conf") or {})
    if batch_conf.get("batch_type", "static") != "static":
        raise ValueError("dataset_conf.batch_conf.batch_type: the decoding drop-in makes "
                         "static batches (recognize.py sets them); train with "
                         "init_dataset_and_dataloader")
    lconf = wenet_lhotse_conf(conf)
    dataset = wenet_dataset(tokenizer, conf, "infer")
    transform = (CutTransform(tokenizer, conf.get("filter_conf") or {})
                 if tokenizer is not None else None)
    return OrderedBatches(wenet_sources(data_list_file, data_type, "--test_data"), dataset,
                          int(batch_conf.get("batch_size", 16)), transform=transform,
                          policy=lconf.read_policy())
