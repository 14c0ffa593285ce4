"""io.policy: ONE ReadPolicy tells every reader how to read -- strict or skip-and-count
for each kind (raw list, shard list, manifest, Shar, Parquet, text), ``pipe:`` refused
or run, a URL protocol opted into from the yaml (no env var) read from a real S3
server (moto), the member size cap, and the policy travelling to DataLoader workers
with its skips counted back."""

from __future__ import annotations

import gzip
import json
import pickle
import tarfile

import pytest
import yaml
from lhotse import CutSet

from wenet_lhotse import CharTokenizer, ReadPolicy
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_raw_list, read_shard_list, write_wenet_shards
from wenet_lhotse.io.streams import open_input
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.lhotse_conf import LhotseConf
from wenet_lhotse.sources.manifest import LazyCheckedManifest
from wenet_lhotse.sources.shar_stream import LazyCheckedShar
from wenet_lhotse.sources.text import read_text_source


@pytest.fixture(scope="module")
def made(corpus, tmp_path_factory):
    """The corpus as cuts, 5-utterance WeNet shards, a manifest and a Shar dir."""
    root = tmp_path_factory.mktemp("policy")
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    shards = write_wenet_shards(cuts, root / "shards", shard_size=5,
                                list_path=root / "shards.list")
    (root / "shar").mkdir()
    cuts.to_shar(root / "shar", fields={"recording": "wav"}, shard_size=20)
    cuts.to_file(root / "cuts.jsonl.gz")
    return {"root": root, "cuts": cuts, "shards": shards, "raw": corpus.data_list,
            "manifest": root / "cuts.jsonl.gz", "shar": root / "shar", "units": corpus.units}


def _bad_raw(made, tmp_path):
    path = tmp_path / "data.list"
    lines = made["raw"].read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:3] + ['{"key": "x", "wav": '] + lines[3:6]) + "\n",
                    encoding="utf-8")
    return lambda policy: list(read_raw_list(path, policy=policy)), 6


def _bad_shard(made, tmp_path):
    tars = made["shards"].read_text(encoding="utf-8").split()
    path = tmp_path / "shards.list"
    path.write_text(f"{tars[0]}\n{tmp_path / 'gone.tar'}\n{tars[1]}\n", encoding="utf-8")
    return lambda policy: list(read_shard_list(path, policy=policy)), 10


def _bad_manifest(made, tmp_path):
    path = tmp_path / "cuts.jsonl"
    lines = [json.dumps(c.to_dict()) for c in list(made["cuts"])[:4]]
    path.write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n", encoding="utf-8")
    return lambda policy: list(LazyCheckedManifest([path], policy=policy)), 4


def _bad_shar(made, tmp_path):
    src = made["shar"]
    with gzip.open(src / "cuts.000000.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    extra = json.loads(lines[0])
    extra["id"] = "no-audio-for-me"
    path = tmp_path / "cuts.000000.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines + [json.dumps(extra)]) + "\n")
    fields = {"cuts": [str(path)], "recording": [str(src / "recording.000000.tar")]}
    return lambda policy: list(LazyCheckedShar(fields, policy=policy)), 20


def _bad_parquet(made, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from wenet_lhotse.sources.parquet import LazyParquetCuts

    rows = []
    for cut in list(made["cuts"])[:3]:
        with open(cut.recording.sources[0].source, "rb") as f:
            rows.append({"id": cut.id, "audio": {"bytes": f.read(), "path": None},
                         "text": cut.supervisions[0].text})
    rows[1]["audio"] = {"bytes": b"not audio at all", "path": None}
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return lambda policy: list(LazyParquetCuts([str(path)], policy=policy)), 2


def _bad_text(made, tmp_path):
    units = made["units"]
    tok = CharTokenizer(units)
    char = next(line.split()[0] for line in units.read_text(encoding="utf-8").splitlines()
                if not line.startswith("<"))
    path = tmp_path / "lm.jsonl"
    path.write_text(f'{{"txt": "{char * 2}"}}\n{{"nope": 1}}\n{{"txt": "{char}"}}\n',
                    encoding="utf-8")
    return lambda policy: read_text_source([str(path)], tok, policy=policy)[0], 2


KINDS = {"raw": _bad_raw, "shard": _bad_shard, "manifest": _bad_manifest, "shar": _bad_shar,
         "parquet": _bad_parquet, "text": _bad_text}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_policy_decides_strict_or_skip_for_every_reader_kind(made, tmp_path, kind):
    read, good = KINDS[kind](made, tmp_path)
    with pytest.raises(WenetDataError):
        read(ReadPolicy())  # WeNet's default: the first bad item raises
    policy = ReadPolicy(strict=False, skip_report=SkipReport(log=False))
    assert len(read(policy)) == good
    assert len(policy.skip_report) == 1  # the one bad item, counted in the policy's report


def test_pipe_refused_unless_the_policy_allows_it(made, tmp_path):
    tar = made["shards"].read_text(encoding="utf-8").split()[0]
    path = tmp_path / "pipe.list"
    path.write_text(f"pipe:cat {tar}\n", encoding="utf-8")
    with pytest.raises(WenetDataError) as err:
        list(read_shard_list(path, policy=ReadPolicy()))
    assert err.value.kind == "refused"
    assert len(list(read_shard_list(path, policy=ReadPolicy(allow_pipe=True)))) == 5
    with pytest.raises(WenetDataError, match="pipe"):
        open_input(f"pipe:cat {tar}", policy=ReadPolicy())
    with open_input(f"pipe:cat {tar}", policy=ReadPolicy(allow_pipe=True)) as f:
        assert f.read(512)[257:262] == b"ustar"


def test_the_member_cap_of_the_policy_applies(made, monkeypatch):
    monkeypatch.delenv("WENET_LHOTSE_MAX_MEMBER_BYTES", raising=False)
    shards = made["shards"]
    assert len(list(read_shard_list(shards, policy=ReadPolicy()))) == 20
    with pytest.raises(WenetDataError) as err:
        list(read_shard_list(shards, policy=ReadPolicy(max_member_bytes=1000)))
    assert err.value.kind == "bad_member" and "1000" in err.value.message
    policy = ReadPolicy(strict=False, max_member_bytes=1000, skip_report=SkipReport(log=False))
    assert list(read_shard_list(shards, policy=policy)) == []
    assert {i.kind for i in policy.skip_report} == {"bad_member"}
    fields = {"cuts": [str(made["shar"] / "cuts.000000.jsonl.gz")],
              "recording": [str(made["shar"] / "recording.000000.tar")]}
    with pytest.raises(WenetDataError) as err:
        list(LazyCheckedShar(fields, policy=ReadPolicy(max_member_bytes=1000)))
    assert err.value.kind == "bad_member"


def test_url_protocols_from_the_yaml_open_an_s3_archive_without_the_env_var(
        made, tmp_path, s3, monkeypatch):
    """``tar://shard.tar::s3://...`` (a shard inside an archive on S3) is refused by
    default; ``lhotse_conf.url_protocols: [tar, '::']`` reads it, no env var set."""
    monkeypatch.delenv("WENET_LHOTSE_URL_PROTOCOLS", raising=False)
    tar = made["shards"].read_text(encoding="utf-8").split()[0]
    outer = tmp_path / "up" / "outer.tar"
    outer.parent.mkdir()
    with tarfile.open(outer, "w") as t:
        t.add(tar, arcname="shard.tar")
    url = f"tar://shard.tar::{s3.put_dir(outer.parent, 'archives')}/outer.tar"
    lst = tmp_path / "shards.list"
    lst.write_text(url + "\n", encoding="utf-8")
    with pytest.raises(WenetDataError) as err:
        read_shard_list(lst, policy=ReadPolicy())
    assert err.value.kind == "refused" and "url_protocols" in err.value.message
    conf = yaml.safe_load("lhotse_conf:\n  url_protocols: [tar, '::']\n  fault_tolerant: true\n")
    policy = LoaderConfig.from_wenet(conf).read_policy()
    assert policy.url_protocols == {"tar", "::"} and not policy.strict
    got = list(read_shard_list(lst, policy=policy))
    assert [c.id for c in got] == [c.id for c in list(made["cuts"])[:5]]
    assert len(policy.skip_report) == 0
    audio = got[0].load_audio()
    assert audio.shape[-1] == got[0].num_samples


def test_url_protocols_reach_audio_that_lhotse_opens_later(made, tmp_path, s3, monkeypatch):
    """A raw list's ``wav`` in an archive on S3: probed by the reader with its policy,
    then decoded by Lhotse (its IO backend has no policy: the reader lends it the
    protocols it allowed)."""
    from wenet_lhotse.io import access

    monkeypatch.delenv("WENET_LHOTSE_URL_PROTOCOLS", raising=False)
    monkeypatch.setattr(access, "_LENT", set())  # nothing lent by earlier tests
    cut = next(iter(made["cuts"]))
    outer = tmp_path / "up" / "audio.tar"
    outer.parent.mkdir()
    with tarfile.open(outer, "w") as t:
        t.add(cut.recording.sources[0].source, arcname="a.wav")
    url = f"tar://a.wav::{s3.put_dir(outer.parent, 'audio')}/audio.tar"
    lst = tmp_path / "data.list"
    lst.write_text(json.dumps({"key": "a", "wav": url, "txt": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(WenetDataError) as err:
        list(read_raw_list(lst, policy=ReadPolicy()))
    assert err.value.kind == "refused"
    policy = LhotseConf.from_dict({"url_protocols": ["tar", "::"]}).read_policy()
    [got] = list(read_raw_list(lst, policy=policy))
    assert got.num_samples == cut.num_samples
    assert (got.load_audio() == cut.load_audio()).all()


def test_url_protocols_key_is_checked():
    with pytest.raises(ValueError, match="lhotse_conf.url_protocols"):
        LhotseConf.from_dict({"url_protocols": "ftp"})
    assert LhotseConf.from_dict({}).read_policy().url_protocols is None


def test_the_policy_pickles_with_a_worker_copy_of_its_report():
    policy = ReadPolicy(strict=False, allow_pipe=True, url_protocols=["FTP"],
                        max_member_bytes=123)
    policy.handle(WenetDataError("bad", "x.list", line=1))
    back = pickle.loads(pickle.dumps(policy))
    assert (back.strict, back.allow_pipe, back.url_protocols, back.max_member_bytes) == \
        (False, True, frozenset({"ftp"}), 123)
    assert len(back.skip_report) == 1 and back.skip_report is not policy.skip_report


class DictKeys:
    """A batch as WeNet's: a dict (the skips of a worker travel in it)."""

    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def test_the_policy_travels_to_dataloader_workers_and_skips_come_back_counted(made, tmp_path):
    """A streamed loader with 2 workers: each reads its tars with the iterator's policy
    (pickled to it); the tar it cannot open is skipped there and counted here."""
    tars = made["shards"].read_text(encoding="utf-8").split()
    lst = tmp_path / "shards.list"
    lst.write_text("\n".join(tars[:2] + [str(tmp_path / "gone.tar")] + tars[2:]) + "\n",
                   encoding="utf-8")
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 3},
            "lhotse_conf": {"mode": "streamed", "fault_tolerant": True}}

    report = SkipReport(log=False)
    _, loader = build_dataloader(str(lst), None, conf, "train", dataset=DictKeys(),
                                 num_workers=2, skip_report=report, persistent_workers=False)
    keys = [k for batch in loader for k in batch["keys"]]
    assert sorted(keys) == sorted(c.id for c in made["cuts"])
    assert [i.kind for i in report] == ["missing_file"]
    assert "gone.tar" in report.items[0].source

