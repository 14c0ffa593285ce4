"""loader.state_check: a resume state is input -- damaged or crafted ones give one
clear error (issue 23): no command run from a kept line, no bare KeyError/TypeError,
no negative or huge positions, no unbounded decompression."""

from __future__ import annotations

import base64
import copy
import json
import zlib

import pytest
from lhotse import CutSet
from loader_common import CONF, Keys

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.loader.buffer_state import pack_lines, unpack_lines
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.state_check import check_loader_state, unpack_bounded
from wenet_lhotse.sources.state_lines import StateError


@pytest.fixture(scope="module")
def saved(data, tmp_path_factory):
    """A map-style train loader over a metadata-only Shar dir, and its state late in an
    epoch (some buffered cuts carry their manifest line)."""
    shar = tmp_path_factory.mktemp("state") / "shar"
    shar.mkdir()
    cuts = list(CutSet.from_file(data["big"][0]).subset(first=600))
    for i in range(12):
        CutSet.from_cuts(cuts[i * 50:(i + 1) * 50]).to_file(shar / f"cuts.{i:06d}.jsonl.gz")
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "buffer_size": 20}}

    def build():
        return build_dataloader(str(shar), None, conf, "train", dataset=Keys(), seed=4)[1]

    loader = build()
    it = iter(loader)
    for _ in range(40):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [b for b in it]
    return build, state, rest


def _items(state):
    snap = state["sampler"]["snapshot"]
    return [i for b in snap["buckets"] + snap.get("merged", []) for i in b]


def test_an_untouched_state_still_restores(saved):
    build, state, rest = saved
    assert any(len(i) == 6 for i in _items(state)), "test data: no kept line"
    fresh = build()
    fresh.load_state_dict(copy.deepcopy(state))
    assert list(fresh) == rest


def test_a_kept_line_with_a_command_source_runs_nothing(saved, tmp_path):
    """The issue: a crafted state (plain data) ran a shell command after load_state_dict:
    its kept lines were materialised without the manifest-line check."""
    build, state, _ = saved
    marker = tmp_path / "PWNED"
    state = copy.deepcopy(state)
    snap = state["sampler"]["snapshot"]
    kept = unpack_lines(snap["lines"])
    obj = json.loads(kept[0][0])
    obj["recording"]["sources"] = [{"type": "command", "channels": [0],
                                    "source": f"touch {marker}"}]
    kept[0][0] = json.dumps(obj)
    snap["lines"] = pack_lines(kept)
    fresh = build()
    with pytest.raises(WenetDataError) as e:
        fresh.load_state_dict(state)
        list(fresh)
    assert e.value.source == "resume state" and e.value.kind == "refused"
    assert "\n" not in str(e.value) and not marker.exists()


def test_a_kept_line_pointing_at_another_tar_is_refused(saved):
    build, state, _ = saved
    state = copy.deepcopy(state)
    snap = state["sampler"]["snapshot"]
    kept = unpack_lines(snap["lines"])
    kept[0][1] = "/etc/passwd"
    snap["lines"] = pack_lines(kept)
    with pytest.raises(StateError, match="not one of this source's Shar tars"):
        build().load_state_dict(state)


def _damage(state, how):
    s = copy.deepcopy(state)
    sampler = s["sampler"]
    item = sampler["snapshot"]["buckets"][next(i for i, b in enumerate(
        sampler["snapshot"]["buckets"]) if b)][0]
    if how == "negative consumed":
        sampler["consumed"] = -3
    elif how == "huge consumed":
        sampler["consumed"] = 1 << 60
    elif how == "negative position":
        item[1] = -5
    elif how == "huge position":
        item[1] = 1 << 50
    elif how == "stream out of range":
        item[0] = 7
    elif how == "line index out of range":
        item[:] = item[:5] + [10 ** 6]
    elif how == "nan duration":
        item[2] = float("nan")
    elif how == "string epoch":
        sampler["epoch"] = "1"
    elif how == "missing snapshot":
        del sampler["snapshot"]
    elif how == "missing sampler":
        del s["sampler"]
    elif how == "bucket not a list":
        sampler["snapshot"]["buckets"] = 5
    elif how == "lines not base64":
        sampler["snapshot"]["lines"] = "%%%"
    elif how == "mux without next_pos":
        sampler["snapshot"]["mux"] = {}
    return s


@pytest.mark.parametrize("how", [
    "negative consumed", "huge consumed", "negative position", "huge position",
    "stream out of range", "line index out of range", "nan duration", "string epoch",
    "missing snapshot", "missing sampler", "bucket not a list", "lines not base64",
    "mux without next_pos"])
def test_damaged_states_give_one_clear_error(saved, how):
    build, state, _ = saved
    with pytest.raises(StateError) as e:
        build().load_state_dict(_damage(state, how))
    assert str(e.value).startswith("bad resume state: ") and "\n" not in str(e.value)


def test_a_zlib_bomb_in_the_state_is_refused_at_the_bound():
    bomb = base64.b64encode(zlib.compress(b"[" + b" " * (64 << 20) + b"]", 9)).decode()
    assert len(bomb) < 200_000
    with pytest.raises(StateError, match="more than"):
        unpack_bounded(bomb, limit=1 << 20)
    assert unpack_bounded(pack_lines([["x", None]])) == [["x", None]]


@pytest.mark.parametrize("sd", [
    {"epoch": -1, "consumed": 0}, {"epoch": 0, "consumed": -2}, {"epoch": 0},
    {"epoch": 0, "consumed": 1, "per_worker": {"0": -1}},
    {"epoch": 0, "consumed": 1, "per_worker": {"9": 1}},
    {"epoch": 0, "consumed": 1, "per_worker": {"x": 1}},
    {"epoch": 0, "consumed": 1, "last_worker": 5}, "not a mapping"])
def test_streamed_states_checked(sd):
    with pytest.raises(StateError):
        check_loader_state(sd, "streamed", num_workers=2)
    check_loader_state({"epoch": 1, "consumed": 3, "per_worker": {"0": 2, "1": 1},
                        "last_worker": 0}, "streamed", num_workers=2)
