"""A kind added as one module + one registry line (NeMo manifests,
``sources/kinds/nemo.py``) works with ``wenet-lhotse validate``, ``stats`` and ``cmvn``
through the tools' generic loop over work units: nothing in convert/ or cli/ knows it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from test_cli_data import run

import wenet_lhotse
from wenet_lhotse.corpus import generate_corpus

ROOT = Path(wenet_lhotse.__file__).parent


@pytest.fixture(scope="module")
def nemo(tmp_path_factory):
    """A NeMo manifest of a generated corpus (relative audio paths, as NeMo writes
    them), and the raw list of the same utterances."""
    root = tmp_path_factory.mktemp("nemo")
    c = generate_corpus(root, num_utterances=6, min_duration=0.3, max_duration=0.8, seed=9)
    lines = []
    for line in c.data_list.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        wav = Path(obj["wav"])
        lines.append(json.dumps({"audio_filepath": str(wav.relative_to(root)),
                                 "duration": sf.info(wav).duration, "text": obj["txt"]}))
    path = root / "train_manifest.json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, c


def test_convert_and_cli_do_not_name_the_new_kind():
    for sub in ("convert", "cli"):
        for f in (ROOT / sub).rglob("*.py"):
            assert "nemo" not in f.read_text(encoding="utf-8").lower(), f


def test_validate_and_stats_read_it(nemo):
    path, c = nemo
    res = run("validate", path)
    assert f"{path} (nemo): 6 utterances OK" in res.stdout and "0 problems" in res.stdout
    nemo_stats = json.loads(run("stats", path, "--json").stdout)
    raw_stats = json.loads(run("stats", c.data_list, "--json").stdout)
    assert nemo_stats["kind"] == "nemo" and nemo_stats["utterances"] == 6
    assert nemo_stats["hours"] == pytest.approx(raw_stats["hours"])
    assert nemo_stats["text_chars"] == raw_stats["text_chars"]


def test_validate_names_its_bad_lines_and_audio(nemo, tmp_path):
    path, _ = nemo
    good = path.read_text(encoding="utf-8").splitlines()
    bad_audio = tmp_path / "garbled.flac"
    sf.write(bad_audio, np.full(8000, 0.1, dtype=np.float32), 16000)
    data = bad_audio.read_bytes()
    bad_audio.write_bytes(data[: len(data) // 3] + bytes(len(data) - len(data) // 3))
    lines = [good[0], "{oops", json.dumps({"audio_filepath": str(bad_audio),
                                           "duration": 0.5, "text": "x"}), good[1]]
    lst = tmp_path / "bad_manifest.json"
    lines = [line if not line.startswith('{"audio_filepath": "wav') else
             line.replace('"wav', f'"{path.parent}/wav', 1) for line in lines]
    lst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = run("validate", lst, code=1)
    assert f"{lst}:2: [json]" in res.stdout
    assert "[bad_audio] 'garbled-" in res.stdout  # an absolute path: stem + path hash
    assert "2 utterances OK" in res.stdout and "2 problems" in res.stdout


def test_cmvn_reads_it_as_the_raw_list(nemo, tmp_path):
    path, c = nemo
    run("cmvn", path, "-o", tmp_path / "nemo_cmvn", "-j", 1)
    run("cmvn", c.data_list, "-o", tmp_path / "raw_cmvn", "-j", 1)
    got = json.loads((tmp_path / "nemo_cmvn").read_text())
    want = json.loads((tmp_path / "raw_cmvn").read_text())
    assert got["frame_num"] == want["frame_num"]
    np.testing.assert_allclose(got["mean_stat"], want["mean_stat"], rtol=1e-9)
