"""The ``nemo`` input kind (sources/kinds/nemo.py): a NeMo ASR manifest is detected,
read lazily as cuts (windows by offset/duration, text, extra fields), trained from
through build_dataloader (``type: nemo``), described by the CLI, and a bad line is a
one-line error naming file:line (or a counted skip)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from wenet_lhotse.cli import main
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.sources import detect_input_kind, open_cuts
from wenet_lhotse.text import CharTokenizer


@pytest.fixture(scope="module")
def nemo(tmp_path_factory):
    """A NeMo manifest of a generated corpus: relative audio paths (to the manifest's
    directory), a ``lang`` and an extra field, and one line cut to a window."""
    corpus = generate_corpus(tmp_path_factory.mktemp("nemo"), num_utterances=6,
                             min_duration=1.0, max_duration=2.0, seed=3)
    rows = [json.loads(line) for line in corpus.data_list.read_text().splitlines()]
    root = corpus.data_list.parent
    lines = [{"audio_filepath": os.path.relpath(r["wav"], root), "duration": 1.0,
              "text": r["txt"], "lang": "zh", "snr": 30} for r in rows]
    lines[-1].update(offset=0.25, duration=0.5)
    path = root / "manifest.json"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path, rows, corpus


def test_a_nemo_manifest_is_detected_and_read_as_cuts(nemo):
    path, rows, _ = nemo
    assert detect_input_kind(path) == "nemo"
    cuts, kind = open_cuts(path)
    cuts = list(cuts)
    assert kind == "nemo" and len(cuts) == len(rows)
    root = path.parent  # the id: the audio path as written, without its extension
    stems = [os.path.splitext(os.path.relpath(r["wav"], root))[0] for r in rows]
    assert [c.id for c in cuts] == stems[:-1] + [f"{stems[-1]}-250-500"]
    first, window = cuts[0], cuts[-1]
    assert first.supervisions[0].text == rows[0]["txt"]
    assert first.supervisions[0].language == "zh" and first.custom == {"snr": 30}
    assert first.duration == first.recording.duration  # no offset: the whole recording
    assert first.recording.sources[0].source == rows[0]["wav"]  # resolved, absolute
    assert (window.start, window.duration) == (0.25, 0.5)
    assert window.load_audio().shape[1] == 8000  # 0.5 s at 16 kHz, from the file


def test_the_cli_sees_a_nemo_manifest(nemo):
    path, rows, _ = nemo
    res = CliRunner().invoke(main, ["stats", str(path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"{path} (nemo)", res.output
    assert f"utterances : {len(rows)}" in res.output


def test_build_dataloader_trains_from_a_nemo_source(nemo):
    path, rows, corpus = nemo
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2},
            "lhotse_conf": {"num_buckets": 1}}
    _, loader = build_dataloader({"path": str(path), "type": "nemo"},
                                 CharTokenizer(corpus.units), conf, "train", seed=0)
    keys = []
    for batch in loader:
        assert batch["feats"].shape[0] == len(batch["keys"]) and batch["target"].numel()
        keys += batch["keys"]
    assert sorted(keys) == sorted(c.id for c in open_cuts(path)[0])


def _with_bad_line(nemo, tmp_path, bad: str):
    path, _, _ = nemo
    lines = path.read_text().splitlines()
    lines.insert(1, bad)
    out = path.parent / f"bad-{tmp_path.name}.json"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("bad,why", [
    ('{"audio_filepath": "wav/none.wav", "duration": 1, "text": "x"}', "audio file not found"),
    ('{"audio_filepath": "wav/x.wav", "text": "x"}', "missing 'duration'"),
    ('{"audio_filepath": "", "duration": 1}', "'audio_filepath' must be a non-empty"),
    ('{"audio_filepath": "wav/x.wav", "duration": "long"}', "'duration' must be a number"),
    ('{"audio_filepath": "wav/x.wav", "duration": 1', "malformed JSON"),
])
def test_a_bad_line_names_file_and_line(nemo, tmp_path, bad, why):
    path = _with_bad_line(nemo, tmp_path, bad)
    with pytest.raises(WenetDataError) as err:
        list(open_cuts(path)[0])
    assert f"{path}:2" in str(err.value) and why in str(err.value)
    assert "\n" not in str(err.value)
    report = SkipReport(log=False)
    cuts = list(open_cuts(path, policy=ReadPolicy(strict=False, skip_report=report))[0])
    assert len(cuts) == len(nemo[1]) and [i.line for i in report] == [2]


def test_the_drop_in_takes_a_nemo_manifest_as_train_data(nemo):
    """WeNet's ``--train_data`` with a NeMo manifest: recognised from its content, as a
    Lhotse manifest is, whatever ``--data_type`` says."""
    from wenet_lhotse.dropin.compat import wenet_sources

    path, _, _ = nemo
    (spec,) = wenet_sources(str(path), "raw")
    assert spec.type == "nemo" and spec.paths == [str(path)]
