"""``wenet-lhotse cmvn`` against WeNet's own ``tools/compute_cmvn_stats.py`` (run from
``$WENET_ROOT`` with the harness stand-ins, whose fbank is torchaudio's kaldi.py) on the
same audio: raw list, shards, cuts manifest and Shar, serial and with 2 processes,
segments, resampling, and bad input."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from wenet_lhotse import ReadPolicy
from wenet_lhotse.cli import main
from wenet_lhotse.convert.cmvn import (
    CmvnConfig,
    chunk_stats,
    compute_cmvn,
    iter_chunks,
    write_cmvn,
)
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport, WenetDataError

FBANK = {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1}
RTOL = 1e-4


def _yaml(path, dataset_conf):
    path.write_text(yaml.safe_dump({"dataset_conf": dataset_conf}), encoding="utf-8")
    return path


def wenet_cmvn(wav_scp, config, out):
    """WeNet's tools/compute_cmvn_stats.py, unmodified, in a subprocess."""
    from wenet_harness import wenet_env, wenet_root

    tool = wenet_root() / "tools" / "compute_cmvn_stats.py"
    res = subprocess.run([sys.executable, str(tool), "--num_workers", "0", "--train_config",
                          str(config), "--in_scp", str(wav_scp), "--out_cmvn", str(out)],
                         env=wenet_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def assert_same_stats(ours, ref):
    assert ours["frame_num"] == ref["frame_num"]
    for key in ("mean_stat", "var_stat"):
        a, b = np.asarray(ours[key]), np.asarray(ref[key])
        assert a.shape == b.shape == (80,)
        rel = np.max(np.abs(a - b) / np.abs(b))
        assert rel < RTOL, (key, rel)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """24 utterances at 16 kHz as a raw list, shards (8 per tar), a cuts manifest and Shar."""
    root = tmp_path_factory.mktemp("cmvn")
    c = generate_corpus(root / "c", num_utterances=24, min_duration=0.5, max_duration=3.0,
                        shard_size=8, seed=5)
    runner = CliRunner()
    for args in (["import", str(c.data_list), "-o", str(root / "cuts.jsonl.gz"), "-j", "1"],
                 ["import", str(c.shards_list), "--shar", str(root / "shar"), "-j", "1"]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
    config = _yaml(root / "train.yaml", {"resample_conf": {"resample_rate": 16000},
                                         "fbank_conf": FBANK})
    return c, root, config


@pytest.fixture(scope="module")
def reference(data, wenet_root):
    c, root, config = data
    return wenet_cmvn(c.wav_scp, config, root / "wenet_global_cmvn")


@pytest.mark.parametrize("kind", ["raw", "shard", "cuts", "shar"])
def test_equals_wenet_tool_on_every_input_kind(data, reference, kind):
    c, root, config = data
    path = {"raw": c.data_list, "shard": c.shards_list, "cuts": root / "cuts.jsonl.gz",
            "shar": root / "shar"}[kind]
    conf = yaml.safe_load(config.read_text())["dataset_conf"]
    stats = compute_cmvn(path, conf, num_jobs=1)
    assert stats.num_utts == 24
    assert_same_stats(stats.to_wenet_json(), reference)


def test_cli_in_parallel_writes_what_wenet_loads(data, reference, tmp_path):
    from wenet_harness import import_wenet

    c, root, config = data
    out = tmp_path / "global_cmvn"
    res = CliRunner().invoke(main, ["cmvn", str(root / "shar"), "-c", str(config), "-o",
                                    str(out), "-j", "2"])
    assert res.exit_code == 0, res.output
    assert "24 utterances" in res.output and "0 skipped" in res.output
    ours = json.loads(out.read_text())
    assert_same_stats(ours, reference)
    # WeNet's own loader (cmvn_conf.is_json_cmvn: true) reads it to the same mean and
    # 1/std. 1/std = (E[x^2] - mean^2)^-1/2 loses ~3 digits to cancellation (variance ~0.2
    # next to E[x^2] ~150), so WeNet's float32 sums (rel. error ~1e-7) move it by ~1e-4.
    (cmvn,) = import_wenet("wenet.utils.cmvn")
    got = cmvn.load_cmvn(str(out), True)
    want = cmvn.load_cmvn(str(root / "wenet_global_cmvn"), True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-3)


def test_segments_as_wenet_tool_cuts_them(tmp_path, wenet_root):
    """Ours on a raw list with start/end; WeNet's tool on the same segments cut out as
    WeNet cuts them (samples int(start*sr) to int(end*sr)) and written as files. (WeNet's
    tool reads a segmented wav.scp with ``torchaudio.load(filepath=...)``, a keyword
    torchaudio >= 2.1 no longer has, so that path cannot run as such.)"""
    import soundfile as sf

    c = generate_corpus(tmp_path / "c", num_utterances=4, min_duration=2.5, max_duration=3.5,
                        seed=7)
    items = [json.loads(x) for x in c.data_list.read_text().splitlines()]
    scp, lines = [], []
    for item in items:
        audio, sr = sf.read(item["wav"], dtype="int16")
        for j, (start, end) in enumerate([(0.0, 1.0), (0.5, 2.25), (1.2345, 2.5)]):
            key = f"{item['key']}-{j}"
            seg = tmp_path / f"{key}.wav"
            sf.write(seg, audio[int(start * sr):int(end * sr)], sr, subtype="PCM_16")
            scp.append(f"{key} {seg}\n")
            lines.append(json.dumps({"key": key, "wav": item["wav"], "txt": item["txt"],
                                     "start": start, "end": end}) + "\n")
    (tmp_path / "wav.scp").write_text("".join(scp))
    (tmp_path / "data.list").write_text("".join(lines))
    config = _yaml(tmp_path / "train.yaml", {"fbank_conf": FBANK})
    ref = wenet_cmvn(tmp_path / "wav.scp", config, tmp_path / "ref")
    stats = compute_cmvn(tmp_path / "data.list", {"fbank_conf": FBANK})
    assert stats.num_utts == 12
    assert_same_stats(stats.to_wenet_json(), ref)


def test_resample_conf_as_wenet_tool(tmp_path, wenet_root):
    """8 kHz audio with ``resample_conf: {resample_rate: 16000}``: both resample first."""
    c = generate_corpus(tmp_path / "c", num_utterances=6, sampling_rate=8000,
                        min_duration=1.0, max_duration=2.0, seed=9)
    conf = {"resample_conf": {"resample_rate": 16000}, "fbank_conf": FBANK}
    ref = wenet_cmvn(c.wav_scp, _yaml(tmp_path / "train.yaml", conf), tmp_path / "ref")
    assert_same_stats(compute_cmvn(c.data_list, conf).to_wenet_json(), ref)
    # without resample_conf both keep 8 kHz: other frames, other stats
    plain = compute_cmvn(c.data_list, {"fbank_conf": FBANK}).to_wenet_json()
    assert plain["frame_num"] == ref["frame_num"]  # 10 ms frames either way
    assert not np.allclose(plain["mean_stat"], ref["mean_stat"], rtol=RTOL)


def test_bad_audio_names_the_file_or_is_skipped_and_counted(tmp_path):
    c = generate_corpus(tmp_path / "c", num_utterances=5, seed=11)
    lines = c.data_list.read_text().splitlines()
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....WAVEfmt not really")
    item = json.loads(lines[2])
    item["wav"] = str(broken)
    lines[2] = json.dumps(item)
    bad = tmp_path / "bad.list"
    bad.write_text("\n".join(lines) + "\n")
    conf = {"fbank_conf": FBANK}
    out = tmp_path / "global_cmvn"
    out.write_text("previous")
    res = CliRunner().invoke(main, ["cmvn", str(bad), "-c",
                                    str(_yaml(tmp_path / "t.yaml", conf)), "-o", str(out)])
    assert res.exit_code == 1
    err = [x for x in res.output.splitlines() if x.strip() and not x.startswith("cmvn:")]
    assert len(err) == 1 and err[0].startswith("error: ") and "bad.list:3" in err[0], err
    assert "broken.wav" in err[0]
    assert out.read_text() == "previous"  # nothing written on failure
    report = SkipReport()
    stats = compute_cmvn(bad, conf, policy=ReadPolicy(strict=False, skip_report=report),
                         num_jobs=2, chunk_size=2)
    assert stats.num_utts == 4 and len(report) == 1
    good = tmp_path / "good.list"
    good.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    want = compute_cmvn(good, conf).to_wenet_json()
    np.testing.assert_allclose(stats.to_wenet_json()["mean_stat"], want["mean_stat"], rtol=1e-9)


def test_chunks_are_picklable_work_units(data):
    """What an executor ships: a chunk and the config pickle, and the per-chunk results
    add up to the whole."""
    c, root, config = data
    conf = CmvnConfig.from_wenet(yaml.safe_load(config.read_text())["dataset_conf"])
    whole = compute_cmvn(c.data_list, config=conf)
    for path in (c.data_list, c.shards_list, root / "shar"):
        chunks, _ = iter_chunks(path, chunk_size=5)
        parts = [pickle.loads(pickle.dumps(chunk_stats(*pickle.loads(pickle.dumps((ch, conf))))))
                 for ch in chunks]
        assert len(parts) > 1
        total = parts[0].stats
        for p in parts[1:]:
            total.merge(p.stats)
        assert total.frame_num == whole.frame_num
        np.testing.assert_allclose(total.var_stat, whole.var_stat, rtol=1e-12)


def test_written_json_and_empty_input(tmp_path):
    empty = tmp_path / "empty.list"
    empty.write_text("")
    with pytest.raises(WenetDataError, match="no readable utterance"):
        compute_cmvn(empty, {"fbank_conf": FBANK})
    c = generate_corpus(tmp_path / "c", num_utterances=2, seed=1)
    out = write_cmvn(compute_cmvn(c.data_list, {"fbank_conf": FBANK}), tmp_path / "d" / "cmvn")
    got = json.loads(out.read_text())
    assert sorted(got) == ["frame_num", "mean_stat", "var_stat"]
    assert isinstance(got["frame_num"], int) and len(got["var_stat"]) == 80
    assert [p.name for p in out.parent.iterdir()] == ["cmvn"]  # no temporary left
