"""Shared by the tests of raw lists whose ``wav`` are URLs (``test_raw_list_s3.py``,
``test_raw_list_http.py``): the same promises, checked the same way for each backend."""

from __future__ import annotations

import copy

import pytest
import torch
from test_loader_compat import DATASET_CONF, WenetStyleCharTokenizer, _args

from wenet_lhotse import SkipReport, WenetDataError
from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy


def assert_drop_in_features_equal(remote_list, local_list, units) -> None:
    """The drop-in's cv batches (map mode, dither 0) from the URL list equal the local
    list's: same keys, same features, bit for bit."""
    tokenizer = WenetStyleCharTokenizer(units)
    conf = copy.deepcopy(DATASET_CONF)
    conf["fbank_conf"] = {**conf["fbank_conf"], "dither": 0.0}

    def cv_batches(path):
        out = init_dataset_and_dataloader(_args(path, path, "raw"),
                                          {"dataset_conf": copy.deepcopy(conf)}, tokenizer)
        return list(out[3])

    remote, local = cv_batches(remote_list), cv_batches(local_list)
    assert [b["keys"] for b in remote] == [b["keys"] for b in local] and remote
    for a, b in zip(remote, local):
        assert torch.equal(a["feats"], b["feats"])


def assert_missing_audio_named(lst, url: str, line: int, kept: int) -> None:
    """A missing ``url`` at ``lst:line``: strict -> one-line ``missing_audio`` error naming
    list, line and URL; fault-tolerant -> the other ``kept`` lines, one counted skip."""
    with pytest.raises(WenetDataError) as info:
        list(read_raw_list(lst))
    assert str(info.value).startswith(f"{lst}:{line}: audio file not found: {url}")
    assert info.value.kind == "missing_audio" and "\n" not in str(info.value)
    report = SkipReport()
    assert len(list(read_raw_list(lst,
                                  policy=ReadPolicy(strict=False, skip_report=report)))) == kept
    assert [(i.line, i.kind) for i in report] == [(line, "missing_audio")]


def assert_cli_takes_the_list(cli, lst, local_list, n: int, tmp_path, jobs: int) -> None:
    """``stats``, ``validate``, ``import`` (manifest and ``--shar``) and ``export`` take the
    URL list through ``cli(*args) -> stdout``: the local list's statistics, ``n``
    utterances OK, the URLs kept by export, the audio copied byte for byte into Shar."""
    from lhotse import CutSet

    cli("import", lst, "--shar", tmp_path / "shar", "-j", jobs)
    stats = cli("stats", lst, "-j", jobs).splitlines()
    assert f"  utterances : {n}" in stats  # and the same figures as the local list's
    assert stats[1:] == cli("stats", local_list).splitlines()[1:]
    checked = cli("validate", lst)
    assert f"{n} utterances OK" in checked and "0 problems" in checked
    cli("import", lst, "-o", tmp_path / "cuts.jsonl.gz", "-j", "1")
    cli("export", tmp_path / "cuts.jsonl.gz", "-o", tmp_path / "back.list")
    assert (tmp_path / "back.list").read_text() == lst.read_text()  # the URLs kept
    local = {c.id: c for c in read_raw_list(local_list)}
    shar = list(CutSet.from_shar(in_dir=tmp_path / "shar"))
    assert sorted(c.id for c in shar) == sorted(local)
    for cut in shar:  # the wavs copied byte for byte into the Shar tars
        assert torch.equal(torch.from_numpy(cut.load_audio()),
                           torch.from_numpy(local[cut.id].load_audio()))
