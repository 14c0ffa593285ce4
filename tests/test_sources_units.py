"""Work units (:mod:`wenet_lhotse.sources.units`): every detected input kind splits into
picklable units whose cuts, read one unit at a time, are the input's cuts in order, with
where each one is; the tools' generic loops over them (validate, stats, cmvn)."""

from __future__ import annotations

import gzip
import json
import pickle

import pytest

from wenet_lhotse.convert.check import validate
from wenet_lhotse.convert.stats import corpus_stats
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources import detect_input_kind
from wenet_lhotse.sources.registry import get_kind


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("units")
    c = generate_corpus(root, num_utterances=11, min_duration=0.3, max_duration=0.8,
                        shard_size=4, seed=3)
    from wenet_lhotse.convert.raw import import_raw
    from wenet_lhotse.convert.shar import wenet_to_shar

    manifest = root / "cuts.jsonl.gz"
    import_raw(c.data_list, manifest, num_workers=1)
    wenet_to_shar(c.shards_list, root / "shar")
    keys = [json.loads(line)["key"] for line in
            c.data_list.read_text(encoding="utf-8").splitlines()]
    return {"raw": c.data_list, "shard": c.shards_list, "cuts": manifest,
            "shar": root / "shar"}, keys


@pytest.mark.parametrize("kind", ["raw", "shard", "cuts", "shar"])
@pytest.mark.parametrize("audio", [True, False])
def test_units_cover_the_input_in_order(inputs, kind, audio):
    paths, keys = inputs
    path = str(paths[kind])
    assert detect_input_kind(path) == kind
    reader = get_kind(kind)
    report = SkipReport()
    units, count = reader.work_units(path, ReadPolicy(strict=True, skip_report=report),
                                     audio=audio, chunk_size=3)
    units = [pickle.loads(pickle.dumps(u)) for u in units]  # what a task receives
    assert count is None or count == len(units)
    assert len(units) == {"raw": 4, "cuts": 4, "shard": 3, "shar": 3}[kind]
    got = []
    for unit in units:
        assert unit.kind == kind
        for item in reader.read_unit(unit, ReadPolicy(), audio=audio):
            got.append(item.cut.id)
            # where it is: the tar and member, the manifest and line, or the list
            if kind in ("shard", "shar"):
                # (a Shar shard's metadata alone: its cuts manifest)
                assert item.member == item.cut.id
                assert item.source.endswith(".tar" if audio or kind == "shard"
                                            else ".jsonl.gz")
            elif kind == "cuts":
                assert item.source == path and item.line == len(got)
            else:
                assert item.source == path
    assert got == keys and not len(report)


def test_raw_units_with_a_mapper_carry_lines(inputs):
    """A caller's pool parses the blocks (``stats -j``): same cuts, lines known."""
    import functools

    from wenet_lhotse.io.parallel import map_bounded

    paths, keys = inputs
    units, _ = get_kind("raw").work_units(
        str(paths["raw"]), ReadPolicy(), audio=False, chunk_size=5,
        mapper=functools.partial(map_bounded, num_workers=2))
    items = [i for u in units for i in u.payload]
    assert [i.cut.id for i in items] == keys
    assert [i.line for i in items] == list(range(1, len(keys) + 1))


def test_shar_unit_problems(inputs, tmp_path):
    """A shard without its tar and a tar without its manifest are problems of the
    split (named), the other shards are units."""
    import shutil

    paths, _ = inputs
    shar = tmp_path / "shar"
    shutil.copytree(paths["shar"], shar)
    (shar / "recording.000001.tar").unlink()
    (shar / "cuts.000002.jsonl.gz").unlink()
    report = SkipReport()
    units, count = get_kind("shar").work_units(
        str(shar), ReadPolicy(strict=False, skip_report=report))
    assert count == 1
    assert [(i.kind, i.source.rsplit("/", 1)[-1]) for i in report] == [
        ("unpaired", "cuts.000001.jsonl.gz"), ("unpaired", "shar")]


def test_validate_and_stats_agree_on_every_kind(inputs):
    paths, keys = inputs
    for kind, path in paths.items():
        res = validate(path)
        assert (res.kind, res.num_ok, res.ok) == (kind, len(keys), True), res.problems
        st = corpus_stats(path)
        assert (st.kind, st.num_utterances) == (kind, len(keys))
        assert st.hours == pytest.approx(res.seconds_ok / 3600, rel=1e-3)


def test_duplicate_keys_across_units_are_found(inputs, tmp_path):
    """A shard list naming one tar twice: its reader sees one tar at a time, the
    generic loop sees the repeat (once per repeated key, named by tar and member)."""
    paths, keys = inputs
    tars = paths["shard"].read_text(encoding="utf-8").split()
    lst = tmp_path / "twice.list"
    lst.write_text("\n".join(tars + tars[:1]) + "\n", encoding="utf-8")
    res = validate(lst)
    dups = [i for i in res.problems if i.kind == "duplicate"]
    assert res.num_ok == len(keys) and len(dups) == 4
    assert all(i.member in keys[:4] for i in dups)


def test_manifest_truncated_is_fatal_for_stats_only(inputs, tmp_path):
    paths, _ = inputs
    data = gzip.decompress(paths["cuts"].read_bytes())
    bad = tmp_path / "cut_short.jsonl.gz"
    bad.write_bytes(gzip.compress(data)[:-40])
    from wenet_lhotse.errors import WenetDataError

    with pytest.raises(WenetDataError) as e:
        corpus_stats(bad)
    assert e.value.kind == "truncated"
    assert "truncated" in validate(bad).problems.counts()


def test_a_kind_without_audio_says_so(tmp_path):
    """A text source has no audio to validate or featurize: one line naming the kind."""
    from wenet_lhotse.errors import WenetDataError

    lst = tmp_path / "sentences.txt"
    lst.write_text("hello world\n", encoding="utf-8")
    with pytest.raises(WenetDataError) as e:
        get_kind("text").work_units(str(lst), ReadPolicy(), audio=True)
    assert str(e.value).count("\n") == 0 and "a text input has no audio" in str(e.value)
    assert e.value.source == str(lst)
