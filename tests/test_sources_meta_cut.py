"""MetaCut: the training sampler's metadata-only cut must be indistinguishable from the
cut Lhotse builds (when built), take the same checks with the same errors, and leave
map-style training batches unchanged."""

from __future__ import annotations

import copy
import json

import pytest
from lhotse.cut import MonoCut
from loader_common import CONF

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.sources import TagCuts
from wenet_lhotse.sources.manifest import parse_manifest_line, parse_manifest_meta
from wenet_lhotse.sources.meta_cut import MetaCut


def _lines(cuts):
    return [json.dumps(c.to_dict(), ensure_ascii=False) for c in cuts]


def test_built_cut_equals_lhotse_cut(data):
    for i, line in enumerate(_lines(data["cuts"])):
        for form in (line, line.encode("utf-8")):
            meta = parse_manifest_meta(form, "m.jsonl", i + 1)
            assert isinstance(meta, MetaCut)
            full = parse_manifest_line(line, "m.jsonl", i + 1)
            assert (meta.id, meta.start, meta.duration, meta.sampling_rate, meta.num_samples) \
                == (full.id, full.start, full.duration, full.sampling_rate, full.num_samples)
            assert [s.text for s in meta.supervisions] == [s.text for s in full.supervisions]
            assert meta.materialize().to_dict() == full.to_dict()
            # anything else asked of it is the built cut's
            assert meta.recording == full.recording


def test_custom_merges_as_the_full_path(data):
    """Tags (existing keys win) then the reader's keys (``shar_tar``) on top, as
    TagCuts + the reader do to a real cut; the cut's own custom is kept."""
    cut = data["cuts"][0].with_custom("lang", "own")
    line = json.dumps(cut.to_dict())
    tags = {"lang": "zh", "task": "asr"}
    meta = TagCuts(tags)(parse_manifest_meta(line, "m", 1, extra_custom={"shar_tar": "t.tar"}))
    full = parse_manifest_line(line, "m", 1)
    full.custom = {**(full.custom or {}), "shar_tar": "t.tar"}
    full = TagCuts(tags)(full)
    assert meta.materialize().custom == full.custom == {
        "lang": "own", "task": "asr", "shar_tar": "t.tar"}
    # tagging a copy leaves the original untouched
    plain = parse_manifest_meta(line, "m", 1)
    TagCuts(tags)(plain)
    assert plain.materialize().custom == {"lang": "own"}


def _bad_variants(good: dict):
    def mutate(fn):
        obj = copy.deepcopy(good)
        fn(obj)
        return json.dumps(obj, ensure_ascii=False)

    yield "not json", '{"id": "a", '
    yield "lone surrogate", mutate(lambda o: o["supervisions"][0].update(text="x")).replace(
        '"text": "x"', '"text": "\\ud800"')
    yield "unsafe id", mutate(lambda o: o.update(id="../etc/passwd"))
    yield "NaN duration", mutate(lambda o: o.update(duration=float("nan")))
    yield "negative start", mutate(lambda o: o.update(start=-1.0))
    yield "supervision inf", mutate(lambda o: o["supervisions"][0].update(
        duration=float("inf")))
    yield "command source", mutate(lambda o: o["recording"]["sources"][0].update(
        type="command", source="echo hi"))
    yield "unknown cut key", mutate(lambda o: o.update(bogus=1))
    yield "recording without num_samples", mutate(lambda o: o["recording"].pop("num_samples"))
    yield "supervision without id", mutate(lambda o: o["supervisions"][0].pop("id"))
    yield "not a cut", json.dumps({"type": "MonoCut"})


def test_bad_lines_fail_the_same_way(data):
    good = data["cuts"][0].to_dict()
    for why, line in _bad_variants(good):
        errors = []
        for parse in (parse_manifest_line, parse_manifest_meta):
            with pytest.raises(WenetDataError) as e:
                parse(line, "bad.jsonl", 7)
            errors.append((e.value.kind, str(e.value)))
        assert errors[0] == errors[1], why
        assert "bad.jsonl" in errors[0][1] and "7" in errors[0][1], why


def test_other_cuts_take_the_full_path(data):
    """Only plain MonoCuts become MetaCuts: a cut with features, a MixedCut, a recording
    with transforms come back as Lhotse cuts."""
    cut = data["cuts"][0]
    mixed = cut.pad(duration=cut.duration + 1.0)
    perturbed = cut.perturb_speed(1.1)
    for other in (mixed, perturbed):
        got = parse_manifest_meta(json.dumps(other.to_dict()), "m", 1,
                                  extra_custom={"shar_tar": "t"})
        assert not isinstance(got, MetaCut)
        assert got.id == other.id and got.custom["shar_tar"] == "t"
    assert isinstance(parse_manifest_meta(json.dumps(cut.to_dict()), "m", 1), MetaCut)


class Dicts:
    """The dataset sees Lhotse cuts, never MetaCuts."""

    def __getitem__(self, cuts):
        assert all(isinstance(c, MonoCut) for c in cuts)
        return [c.to_dict() for c in cuts]


@pytest.mark.parametrize("source", ["manifest", "shar"])
def test_training_batches_unchanged(data, source):
    """Map-style training over MetaCuts gives the batches, and the built cuts, that the
    same sampler over Lhotse cuts gives (two ranks, two epochs)."""
    conf = {**CONF, "shuffle": True, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "map"}}
    runs = []
    for light in (True, False):
        epochs = []
        for rank in (0, 1):
            _, loader = build_dataloader(str(data[source]), None, conf, "train",
                                         dataset=Dicts(), seed=3, world_size=2, rank=rank)
            for stream in loader.bucketing_sampler.mux.streams:
                assert stream.reader.light  # the training sampler reads metadata only
                stream.reader.light = light
            epochs.append([list(loader), list(loader)])
        runs.append(epochs)
    assert runs[0] == runs[1]
    ids = [c["id"] for ep in runs[0][0] + runs[0][1] for b in ep for c in b]
    assert sorted(ids) == sorted([c.id for c in data["cuts"]] * 2)  # 2 epochs, once each


def test_cv_gets_lhotse_cuts(data):
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "map"}}
    _, loader = build_dataloader(str(data["manifest"]), None, conf, "cv", dataset=Dicts(),
                                 seed=3)
    batches = list(loader)  # Dicts asserts Lhotse cuts
    assert sorted(c["id"] for b in batches for c in b) == sorted(c.id for c in data["cuts"])


def test_raw_list_from_the_probe_cache_holds_metacuts(data, tmp_path):
    """A raw list read from the probe cache is held as MetaCuts for training (the whole
    list stays in memory for WeNet's per-epoch shuffle) and trains as Lhotse cuts do."""
    from wenet_lhotse.sources.positioned import ListReader

    conf = {**CONF, "shuffle": True,
            "lhotse_conf": {**CONF["lhotse_conf"], "probe_cache": str(tmp_path / "cache")}}
    runs = []
    for light in (True, False):  # the first run writes the cache, the second reads it
        _, loader = build_dataloader(str(data["raw"]), None, conf, "train", dataset=Dicts(),
                                     seed=5)
        reader = loader.bucketing_sampler.mux.streams[0].reader
        assert isinstance(reader, ListReader)
        assert all(isinstance(c, MetaCut) for c in reader.cuts)
        if not light:
            reader.cuts = [c.materialize() for c in reader.cuts]
        runs.append([list(loader), list(loader)])
    assert runs[0] == runs[1]
    ids = sorted(c["id"] for ep in runs[0] for b in ep for c in b)
    assert ids == sorted([c.id for c in data["cuts"]] * 2)
