"""A memory budget per utterance (issue 23, group 2): archive URLs refused, bounded
resampling at any rate, compressed members streamed against the cap, yaml alias
bombs refused, FIFOs refused before open(). The memory cases run in a subprocess
under an address-space limit (RLIMIT_AS), so a regression fails instead of swapping."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import soundfile as sf
from adversarial import REPO, add_sparse, cli, raw_line, tar_of, utt

from wenet_lhotse import SkipReport, WenetDataError, read_raw_list, read_shard_list
from wenet_lhotse.io.access import url_problem
from wenet_lhotse.io.policy import ReadPolicy

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
    assert list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report))) == []
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


# ------------------------------------------------------------------ resampling


def odd_rate_list(tmp_path, rate: int, forge_rate: int = 0):
    """A raw list of one genuine 1 s WAV at ``rate`` Hz (its header patched to claim
    ``forge_rate`` Hz when given) and one ordinary 16 kHz WAV."""
    pcm = (np.random.default_rng(1).standard_normal(rate) * 3000).astype(np.int16)
    odd = tmp_path / "odd.wav"
    sf.write(odd, pcm, rate, subtype="PCM_16")
    if forge_rate:
        data = bytearray(odd.read_bytes())
        data[24:28] = forge_rate.to_bytes(4, "little")
        data[28:32] = (forge_rate * 2 & 0xFFFFFFFF).to_bytes(4, "little")
        odd.write_bytes(bytes(data))
    ok = tmp_path / "ok.wav"
    sf.write(ok, pcm[:16000], 16000, subtype="PCM_16")
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="odd", wav=str(odd), txt="a b") + "\n"
                   + raw_line(key="ok", wav=str(ok), txt="a") + "\n")
    units = tmp_path / "units.txt"
    units.write_text("<blank> 0\n<unk> 1\na 2\nb 3\n<sos/eos> 4\n")
    return lst, units


TRAIN = """
    import sys
    from wenet_lhotse import CharTokenizer, WenetDataError, build_dataloader
    lst, units, tolerant = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    conf = {{"fbank_conf": {{"num_mel_bins": 23}}, "resample_conf": {{"resample_rate": 16000}},
            "lhotse_conf": {{"fault_tolerant": tolerant}}}}
    _, loader = build_dataloader(lst, CharTokenizer(units), conf, "train")
    try:
        keys = sorted(k for b in loader for k in b["keys"])
    except WenetDataError as err:
        print("ERROR", err)
        raise SystemExit(3)
    print("KEYS", keys, "SKIPS", [(i.kind, i.line) for i in loader.skip_report])
"""


def train_limited(lst, units, tolerant: bool):
    code = TRAIN.format() + "\n"
    return subprocess.run(
        [sys.executable, "-c", f"import resource; resource.setrlimit(resource.RLIMIT_AS, "
         f"({AS_LIMIT}, {AS_LIMIT}))\n" + textwrap.dedent(code),
         str(lst), str(units), "1" if tolerant else "0"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_an_odd_rate_resamples_in_bounded_memory(tmp_path):
    """The issue: a genuine 1 s WAV at 32003 Hz made training's resample to 16 kHz try
    to allocate > 12 GB. Under a 3 GB address-space limit it now trains."""
    lst, units = odd_rate_list(tmp_path, 32003)
    res = train_limited(lst, units, tolerant=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "KEYS ['odd', 'ok'] SKIPS []" in res.stdout


def test_a_forged_rate_is_refused_in_one_line(tmp_path):
    """A header claiming 2^31-1 Hz (17 GB to resample) is a bad line, not an allocation."""
    lst, units = odd_rate_list(tmp_path, 16000, forge_rate=(1 << 31) - 1)
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.line, e.value.kind) == (1, "bad_audio") and "sampling rate" in str(e.value)
    res = train_limited(lst, units, tolerant=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "KEYS ['ok'] SKIPS [('bad_audio', 1)]" in res.stdout


def test_the_blocked_resampler_matches_the_kernel_one():
    """Above MAX_KERNEL_ELEMENTS the output is computed in blocks from torchaudio's
    formula: the same samples as the kernel path (to float32 rounding), nearer a float64
    reference than the float32 kernel itself."""
    import torch
    from lhotse.augmentation.resample import resample as reference

    from wenet_lhotse.formats import audio
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(30000).astype(np.float32))
    for orig, new in [(44100, 16000), (22050, 16000), (8000, 16000), (16000, 17600)]:
        n = audio.resampled_length(x.numel(), orig, new)
        kernel = audio.sinc_resample(x, orig, new, n)
        blocked = audio._blocked_resample(x, orig, new, n, budget=1 << 12)
        exact = reference(x.double()[None], orig, new)[0][:n]
        assert blocked.shape == kernel.shape == (n,)
        assert float((blocked.double() - exact).abs().max()) < 1e-6
        assert float((blocked - kernel).abs().max()) < 5e-5
    with pytest.raises(ValueError, match="sampling rate"):
        audio.resample(x.numpy(), (1 << 31) - 1, 16000)


# ------------------------------------------------------------------ FIFOs


@pytest.fixture
def fifo_shards(tmp_path):
    """A shard list: a good tar, then a FIFO named ``x.tar`` (nobody writes to it)."""
    good = tmp_path / "good.tar"
    good.write_bytes(tar_of(utt("u1") + utt("u2", 1)))
    fifo = tmp_path / "x.tar"
    os.mkfifo(fifo)
    lst = tmp_path / "shards.list"
    lst.write_text(f"{good}\n{fifo}\n")
    return lst, fifo


def test_a_fifo_in_a_shard_list_is_refused_not_waited_on(fifo_shards):
    """The issue: a FIFO named *.tar hung validate, import and training."""
    lst, fifo = fifo_shards
    with pytest.raises(WenetDataError, match="FIFO") as e:
        list(read_shard_list(lst))
    assert str(fifo) in str(e.value)
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_shard_list(lst,
                                          policy=policy)] == ["u1", "u2"]
    assert len(report) == 1 and "FIFO" in report.items[0].message


@pytest.mark.parametrize("command", ["validate", "import"])
def test_a_fifo_in_the_cli(fifo_shards, tmp_path, command):
    lst, fifo = fifo_shards
    args = ["validate", lst] if command == "validate" else \
        ["import", lst, "--shar", tmp_path / "shar", "-j", "1"]
    res = cli(*args, timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "FIFO" in res.stdout + res.stderr and str(fifo) in res.stdout + res.stderr


def test_a_fifo_as_a_list_or_manifest(tmp_path):
    from wenet_lhotse.io.streams import open_input
    from wenet_lhotse.sources.positioned import JsonlReader
    fifo = tmp_path / "cuts.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(WenetDataError, match="FIFO"):
        open_input(str(fifo))
    with pytest.raises(WenetDataError):  # refused ("no such list file"), not waited on
        list(read_raw_list(fifo))
    with pytest.raises(WenetDataError, match="FIFO"):
        list(JsonlReader([str(fifo)]).iter_from(0))


# ------------------------------------------------------------------ yaml alias bombs

BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9)
                  + "]\n" for i in range(8))
        + "dataset_conf:\n  fbank_conf: *i\n")


def _limit_as():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


@pytest.mark.parametrize("command", ["cmvn", "bench"])
def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path, command):
    """The issue: a 651-byte alias bomb ran `bench`/`cmvn -c` past 60 s at 3-5.7 GB and
    the error printed the whole value."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 700
    lst = tmp_path / "data.list"
    lst.write_text("")
    args = (["cmvn", lst, "-c", bomb, "-o", tmp_path / "cmvn.json"] if command == "cmvn"
            else ["bench", bomb, "--data", lst])
    res = cli(*args, timeout=60, preexec_fn=_limit_as)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    line = next(x for x in res.stderr.splitlines() if str(bomb) in x)
    assert "alias" in line and len(res.stderr) < 2000


def test_yaml_with_a_few_anchors_still_loads():
    from wenet_lhotse.formats.yaml_load import bounded_safe_load
    assert bounded_safe_load("f: &f {a: 1}\ng: *f\n") == {"f": {"a": 1}, "g": {"a": 1}}


def test_config_errors_never_echo_a_whole_value(tmp_path):
    from wenet_lhotse.errors import WenetConfigError
    from wenet_lhotse.loader.config_check import load_wenet_yaml
    conf = tmp_path / "c.yaml"
    conf.write_text("dataset_conf:\n  batch_conf:\n    batch_size: [" + ",".join(
        ["12345678"] * 5000) + "]\n")
    with pytest.raises(WenetConfigError) as e:
        load_wenet_yaml(conf)
    assert len(str(e.value)) < 300


# ------------------------------------------------------------------ compressed members


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, read without holding them."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def gz_bomb(path, claim: int = 200 << 20):
    """A .tar.gz: one good utterance, then ``u2.wav`` of ``claim`` bytes (a WAV header
    and zeros; under the 1 GiB member cap) that gzip squeezes ~1000x."""
    import tarfile as tf
    head = wav_header(claim - 44)
    with tf.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in utt("u1"):
            info = tf.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tf.TarInfo("u2.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        info = tf.TarInfo("u2.wav")
        info.size = claim
        tar.addfile(info, io.BufferedReader(_Chain(head, _Zeros(claim - len(head)))))
    return path


def wav_header(data_bytes: int) -> bytes:
    import struct
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
            + b"data" + struct.pack("<I", data_bytes))


class _Chain(io.RawIOBase):
    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.head:
            k = min(len(b), len(self.head))
            b[:k] = self.head[:k]
            self.head = self.head[k:]
            return k
        return self.rest.readinto(b)


def test_a_compressed_member_bomb_stops_at_its_ratio(tmp_path):
    """The issue: a 0.9 MB .tar.gz holding a 900 MiB member (under the 1 GiB cap) took
    4.9 GB in validate, 7.2 GB per import process. Now the member is read in blocks and
    refused at 200x its compressed bytes; under a 3 GB address-space limit."""
    bomb = gz_bomb(tmp_path / "bomb.tar.gz")
    assert bomb.stat().st_size < 2 << 20
    lst = tmp_path / "shards.list"
    lst.write_text(f"{bomb}\n")
    res = run_limited(f"""
        from wenet_lhotse import ReadPolicy, SkipReport, WenetDataError, read_shard_list
        report = SkipReport()
        policy = ReadPolicy(strict=False, skip_report=report)
        keys = [c.id for c in read_shard_list({str(lst)!r}, policy=policy)]
        print("KEYS", keys, [(i.kind, i.member) for i in report])
        try:
            list(read_shard_list({str(lst)!r}))
        except WenetDataError as err:
            print("STRICT", err)
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "KEYS ['u1'] [('bad_member', 'u2.wav')]" in res.stdout
    assert "STRICT" in res.stdout and "decompress" in res.stdout and "u2.wav" in res.stdout
    res = cli("validate", lst, timeout=300, preexec_fn=_limit_as)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "u2.wav" in res.stdout + res.stderr
