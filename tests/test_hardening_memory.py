"""A memory budget per utterance (issue 23, group 2): archive URLs refused, bounded
resampling at any rate, compressed members streamed against the cap, yaml alias
bombs refused, FIFOs refused before open(). The memory cases run in a subprocess
under an address-space limit (RLIMIT_AS), so a regression fails instead of swapping."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest
import soundfile as sf
from adversarial import REPO, add_sparse, cli, raw_line, tar_of, utt

from wenet_lhotse import SkipReport, WenetDataError, read_raw_list, read_shard_list
from wenet_lhotse.formats.checks import url_problem

#: The address-space limit of the memory subprocesses (bytes): torch and Lhotse
#: imported take ~1.5 GB of address space here.
AS_LIMIT = 3 << 30


def run_limited(code: str, limit: int = AS_LIMIT, timeout: int = 300, env=None):
    """Run ``code`` in a fresh interpreter whose address space is capped at ``limit``."""
    prelude = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n")
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})))


# ------------------------------------------------------------------ URL protocols


@pytest.mark.parametrize("url", ["tar://big.wav::sparse.tar", "zip://a.wav::bomb.zip",
                                 "ftp://host:21/a.wav", "simplecache::s3://b/k.wav",
                                 "s3://b/k.wav::x", "memory://a.wav"])
def test_url_protocols_outside_the_allow_list_are_refused(url):
    assert url_problem(url) is not None


@pytest.mark.parametrize("url", ["s3://b/k.wav", "gs://b/k", "https://h/a.wav",
                                 "/data/a.wav", "a::b.wav", "pipe:cat x"])
def test_allowed_urls_and_paths(url):
    assert url_problem(url) is None


def test_the_opt_in_adds_protocols(monkeypatch):
    monkeypatch.setenv("WENET_LHOTSE_URL_PROTOCOLS", "ftp, memory")
    assert url_problem("ftp://h/a.wav") is None
    assert url_problem("tar://a::b.tar") is not None
    monkeypatch.setenv("WENET_LHOTSE_URL_PROTOCOLS", "tar,::")
    assert url_problem("tar://a::b.tar") is None


def test_an_archive_url_in_a_raw_list_reads_nothing(tmp_path):
    """The issue: `tar://big.wav::sparse.tar` (2 KB claiming 8 GiB) went around the tar
    member checks through fsspec: 5.4 GB before MemoryError."""
    sparse = tmp_path / "sparse.tar"
    sparse.write_bytes(tar_of([lambda t: add_sparse(t, "big.wav", 8 << 30)]))
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="a", wav=f"tar://big.wav::{sparse}", txt="x") + "\n"
                   + raw_line(key="b", wav="ftp://127.0.0.1:1/b.wav", txt="y") + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.line, e.value.kind) == (1, "refused")
    report = SkipReport()
    assert list(read_raw_list(lst, strict=False, skip_report=report)) == []
    assert [(i.line, i.kind) for i in report] == [(1, "refused"), (2, "refused")]
    res = cli("validate", lst)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert f"{lst}:1" in res.stdout + res.stderr


def test_an_archive_url_in_a_shard_list_is_refused(tmp_path):
    lst = tmp_path / "shards.list"
    lst.write_text("zip://x.tar::bomb.zip\n")
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert (e.value.line, e.value.kind) == (1, "refused")
