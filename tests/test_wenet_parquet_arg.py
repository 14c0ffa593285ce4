"""A Parquet file (or ``datasets`` directory) as WeNet's ``--train_data`` through the
drop-in (issue 32, item 7): one line that says what to do, with no binary bytes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
from wenet_lhotse.text import CharTokenizer

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}
WANT = ("Parquet: use `type: parquet` in `lhotse_conf.sources` or "
        "`wenet-lhotse parquet-import`")


@pytest.mark.parametrize("data_type", ["raw", "shard"])
@pytest.mark.parametrize("as_dir", [False, True])
def test_parquet_as_train_data_is_one_line(corpus, tmp_path, data_type, as_dir):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"id": ["a"], "audio": [b"RIFF\x15\x04\xd0\x0f" * 4],
                             "text": ["x"]}), path, compression="zstd")
    if as_dir:  # a directory of Parquet files, as the hub's snapshots hold them
        (tmp_path / "d").mkdir()
        path = path.rename(tmp_path / "d" / "train-00000.parquet").parent
    configs = {"tokenizer": "char", "dataset_conf": {"batch_conf": {"batch_size": 4}},
               "tokenizer_conf": {"symbol_table_path": str(corpus.units),
                                  "special_tokens": SPECIAL}}
    args = SimpleNamespace(train_data=str(path), cv_data=str(corpus.data_list),
                           data_type=data_type, num_workers=0, pin_memory=False, prefetch=2)
    with pytest.raises(ValueError) as info:
        init_dataset_and_dataloader(args, configs, CharTokenizer(str(corpus.units)))
    message = str(info.value)
    assert message == f"--train_data {path}: {WANT}"
    assert all(" " <= ch <= "~" for ch in message), repr(message)


def test_lhotse_conf_sources_replacing_train_data_is_logged(corpus, tmp_path, caplog):
    import json
    import logging
    from pathlib import Path

    first = json.loads(corpus.data_list.read_text(encoding="utf-8").splitlines()[0])
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"id": [first["key"]], "text": [first["txt"]],
                             "audio": [Path(first["wav"]).read_bytes()]}), path)
    configs = {"tokenizer": "char",
               "dataset_conf": {"batch_conf": {"batch_size": 4}, "lhotse_conf": {
                   "sources": [{"path": str(path), "type": "parquet"}]}},
               "tokenizer_conf": {"symbol_table_path": str(corpus.units),
                                  "special_tokens": SPECIAL}}
    args = SimpleNamespace(train_data="data/train/data.list", cv_data=str(corpus.data_list),
                           data_type="raw", num_workers=0, pin_memory=False, prefetch=2)
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.dropin.compat"):
        init_dataset_and_dataloader(args, configs, CharTokenizer(str(corpus.units)))
    assert ("dataset_conf.lhotse_conf.sources replaces --train_data (data/train/data.list "
            "is not read)" in caplog.text)
    assert "replaces --cv_data" not in caplog.text
