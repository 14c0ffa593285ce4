"""Files we read back run nothing and never crash a run (issue 30): a loader state beside
a checkpoint, a probe cache, a shard index, a Shar shard's skip record and the manifest
lines a state keeps are each planted with a pickled ``__reduce__`` payload (it would
create a marker file); nothing runs, and each gives its documented fallback (WeNet's
replay with one WARNING naming the file, a rebuild) or one error line. Loader states cut
short, empty, of another schema, mode or data replay with one line too."""

from __future__ import annotations

import base64
import gzip
import logging
import os
import pickle
import zlib
from pathlib import Path

import pytest
import torch
from lhotse import CutSet
from loader_common import CONF, Keys

from wenet_lhotse.dropin.resume import loader_state_path, restore_loader_state
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.shard_index import ShardIndex
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.state_check import StateError, read_state_file, unpack_bounded
from wenet_lhotse.sources.probe_cache import probed_raw_list
from wenet_lhotse.sources.shar_record import read_fingerprint, read_record


class Payload:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def shar_loader(data, tmp_path_factory):
    """``build()`` -> a fresh map-style train loader over a small Shar dir; its state after
    10 batches; the batches after those."""
    shar = tmp_path_factory.mktemp("state_files") / "shar"
    shar.mkdir()
    cuts = list(CutSet.from_file(data["big"][0]).subset(first=200))
    for i in range(4):
        CutSet.from_cuts(cuts[i * 50:(i + 1) * 50]).to_file(shar / f"cuts.{i:06d}.jsonl.gz")

    def build(path=shar):
        return build_dataloader(str(path), None, CONF, "train", dataset=Keys(), seed=4)[1]

    loader = build()
    it = iter(loader)
    for _ in range(10):
        next(it)
    return build, loader.state_dict(), list(it), cuts


def _restore(loader, ckpt: Path, caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.dropin.resume"):
        resumed = restore_loader_state(loader, str(ckpt))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    return resumed, warnings


def test_a_saved_state_resumes_as_plain_data(shar_loader, tmp_path, caplog):
    build, state, rest, _ = shar_loader
    ckpt = tmp_path / "step_9.pt"
    torch.save(state, loader_state_path(ckpt, 0))
    fresh = build()
    resumed, warnings = _restore(fresh, ckpt, caplog)
    assert resumed and not warnings
    assert list(fresh) == rest


def _plant(path: Path, how: str, state: dict, marker: Path) -> None:
    if how == "payload":
        torch.save({**state, "sampler": Payload(marker)}, path)
    elif how == "payload_top":
        torch.save(Payload(marker), path)
    elif how == "raw_pickle":  # not even a torch zip: a bare pickle stream
        path.write_bytes(pickle.dumps(Payload(marker)))
    elif how.startswith("cut_"):
        torch.save(state, path)
        data = path.read_bytes()
        keep = {"cut_1": 1, "cut_100": 100, "cut_half": len(data) // 2,
                "cut_last": len(data) - 1}[how]
        path.write_bytes(data[:keep])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "schema":
        torch.save({"mode": "map", "sampler": {"consumed": "x"}}, path)
    elif how == "not_a_mapping":
        torch.save([1, 2, 3], path)
    elif how == "mode":
        torch.save({"mode": "streamed", "epoch": 0, "consumed": 3}, path)
    elif how == "directory":
        path.mkdir()


CASES = ["payload", "payload_top", "raw_pickle", "cut_1", "cut_100", "cut_half", "cut_last",
         "empty", "schema", "not_a_mapping", "mode", "directory"]


@pytest.fixture(scope="module")
def other_state(data, tmp_path_factory):
    """The state of a loader over other data (other cut ids) mid-epoch."""
    shar = tmp_path_factory.mktemp("other") / "shar"
    shar.mkdir()
    cuts = list(CutSet.from_file(data["big"][0]).subset(first=400))[200:]
    for i in range(4):
        CutSet.from_cuts(cuts[i * 50:(i + 1) * 50]).to_file(shar / f"cuts.{i:06d}.jsonl.gz")
    loader = build_dataloader(str(shar), None, CONF, "train", dataset=Keys(), seed=4)[1]
    it = iter(loader)
    for _ in range(10):
        next(it)
    return loader.state_dict()


def test_a_state_of_other_data_replays_with_one_warning(shar_loader, other_state, tmp_path,
                                                        caplog):
    build, _, _, _ = shar_loader
    ckpt = tmp_path / "step_9.pt"
    torch.save(other_state, loader_state_path(ckpt, 0))
    fresh = build()
    resumed, warnings = _restore(fresh, ckpt, caplog)
    assert resumed is False and len(warnings) == 1
    assert "not this data's" in warnings[0].getMessage()


@pytest.mark.parametrize("how", CASES)
def test_a_damaged_or_planted_state_replays_with_one_warning(shar_loader, tmp_path, caplog,
                                                             how):
    """The issue: a ``__reduce__`` payload beside a checkpoint ran (``weights_only=False``);
    a state cut short crashed with ``OSError: [Errno 22]`` (only ValueError was caught)."""
    build, state, _, _ = shar_loader
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "step_9.pt"
    path = loader_state_path(ckpt, 0)
    _plant(path, how, state, marker)
    fresh = build()
    resumed, warnings = _restore(fresh, ckpt, caplog)
    assert not marker.exists()
    assert resumed is False
    assert len(warnings) == 1
    msg = warnings[0].getMessage()
    assert str(path) in msg and "replays from its start" in msg and "\n" not in msg
    assert warnings[0].exc_info is None
    assert len(list(fresh)) > 0  # the epoch replays


@pytest.mark.parametrize("how", ["payload", "payload_top", "raw_pickle", "cut_half"])
def test_a_planted_state_beside_a_streamed_loader_replays_too(shar_loader, data, tmp_path,
                                                              caplog, how):
    """A streamed loader's state was first read with ``weights_only=False`` (for the check
    of its world size) before the safe read: the payload ran there."""
    _, state, _, _ = shar_loader
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "step_9.pt"
    path = loader_state_path(ckpt, 0)
    _plant(path, how, state, marker)
    conf = {**CONF, "lhotse_conf": {**CONF.get("lhotse_conf", {}), "mode": "streamed"}}
    fresh = build_dataloader(str(data["shar"]), None, conf, "train", dataset=Keys(), seed=4)[1]
    assert fresh.mode == "streamed"
    resumed, warnings = _restore(fresh, ckpt, caplog)
    assert not marker.exists()
    assert resumed is False and len(warnings) == 1
    assert str(path) in warnings[0].getMessage()


def test_read_state_file_refuses_a_payload_in_one_line(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "x.pt"
    torch.save({"a": [Payload(marker)]}, path)
    with pytest.raises(StateError) as e:
        read_state_file(path)
    assert not marker.exists()
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert len(str(e.value)) < 400


def test_kept_lines_holding_a_pickle_are_refused(tmp_path):
    """The manifest lines a state keeps are zlib-compressed JSON: a pickle there is
    bad data, never unpickled."""
    marker = tmp_path / "PWNED"
    packed = base64.b64encode(zlib.compress(pickle.dumps([Payload(marker)]))).decode()
    with pytest.raises(StateError, match="snapshot.lines"):
        unpack_bounded(packed)
    assert not marker.exists()


def test_a_probe_cache_holding_a_pickle_is_rebuilt(corpus, tmp_path):
    marker = tmp_path / "PWNED"
    res = probed_raw_list(corpus.data_list, cache_dir=tmp_path)
    blob = pickle.dumps(Payload(marker))
    with gzip.open(res.manifest, "wb") as f:
        f.write(blob)
    res.skips.write_bytes(blob)
    again = probed_raw_list(corpus.data_list, cache_dir=tmp_path)
    assert not again.from_cache
    assert len(CutSet.from_file(again.manifest)) == len(corpus.keys)
    assert not marker.exists()


def test_a_shard_index_holding_a_pickle_is_one_error(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "shards.list.idx"
    path.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(WenetDataError) as e:
        ShardIndex(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()


def test_a_shar_skip_record_holding_a_pickle_is_no_record(tmp_path):
    """A Shar shard's state (its skip record and input fingerprint, in the gzip
    header's comment) is JSON: a pickle there reads as no record (the shard is then
    written again by a rerun), never unpickled."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "cuts.000000.jsonl.gz"
    comment = b"wenet-lhotse-skips:" + pickle.dumps(Payload(marker), protocol=0)
    comment = comment.replace(b"\x00", b" ")  # FCOMMENT is zero-terminated
    header = (b"\x1f\x8b\x08\x10" + b"\x00" * 4 + b"\x00\xff" + comment + b"\x00")
    body = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = b'{"id": "a"}\n'
    data = body.compress(raw) + body.flush()
    path.write_bytes(header + data + zlib.crc32(raw).to_bytes(4, "little")
                     + len(raw).to_bytes(4, "little"))
    assert gzip.open(path).read() == raw  # a valid gzip file with the planted comment
    assert read_record(path) is None and read_fingerprint(path) is None
    assert not marker.exists()


def test_state_saved_by_the_drop_in_loads_with_weights_only(shar_loader, tmp_path):
    """What :func:`~wenet_lhotse.dropin.resume.save_loader_state` writes is plain data
    (so ``weights_only=True`` loses nothing)."""
    _, state, _, _ = shar_loader
    path = tmp_path / "s.pt"
    torch.save(state, path)
    assert read_state_file(path) == state
