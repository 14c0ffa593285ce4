import json
from pathlib import Path

import soundfile as sf

from wenet_lhotse.corpus import ALPHABET, generate_corpus


def test_corpus_layout_and_determinism(tmp_path, corpus):
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20
    total = 0.0
    for line, key in zip(lines, corpus.keys):
        d = json.loads(line)
        assert d["key"] == key
        assert set(d["txt"]) <= set(ALPHABET + " ")
        info = sf.info(d["wav"])
        assert info.samplerate == 16000 and info.subtype == "PCM_16"
        assert 1.0 <= info.duration <= 4.0 + 1.0
        total += info.duration
    assert abs(total - corpus.total_duration) < 1e-3
    units = corpus.units.read_text(encoding="utf-8").splitlines()
    assert units[:3] == ["<blank> 0", "<unk> 1", "<sos/eos> 2"]  # WeNet's current layout
    again = generate_corpus(tmp_path / "again", num_utterances=20, min_duration=1.0,
                            max_duration=4.0, seed=1)
    a, _ = sf.read(json.loads(lines[3])["wav"], dtype="int16")
    b, _ = sf.read(str(again.root / "wav" / f"{corpus.keys[3]}.wav"), dtype="int16")
    assert (a == b).all()


def test_units_equal_make_units_of_the_same_text(tmp_path):
    """``corpus`` and ``make-units`` write one symbol table for the same data (the same
    function): byte for byte, ``▁`` in code-point order after the letters."""
    import os
    import subprocess

    paths = generate_corpus(tmp_path / "c", num_utterances=6, seed=2)
    out = tmp_path / "lang_char.txt"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    from cli_server import wenet_lhotse_cmd  # the CLI in its own process, forked

    res = subprocess.run([*wenet_lhotse_cmd(), "make-units", str(paths.text),
                          "-o", str(out)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == paths.units.read_bytes()
    units = [line.split()[0] for line in paths.units.read_text(encoding="utf-8").splitlines()]
    assert units[:3] == ["<blank>", "<unk>", "<sos/eos>"] and units[-1] == "▁"
    assert units[3:-1] == sorted(set("".join(
        line.split(maxsplit=1)[1] for line in paths.text.read_text().splitlines())) - {" "})
