"""sources.shar_audio: Shar audio attached to emitted batches only."""

from __future__ import annotations

import tarfile

import numpy as np
from loader_common import CONF, Audio

from wenet_lhotse.loader.build import build_dataloader


def test_shar_audio_is_attached_for_emitted_batches(data):
    _, loader = build_dataloader(str(data["shar"]), None, CONF, "train", dataset=Audio())
    got = {k: v for b in loader for k, v in b.items()}
    ref = {c.id: c.load_audio() for c in data["cuts"]}
    assert got.keys() == ref.keys()
    for k in ref:  # flac is lossless: the same samples as the original wav
        assert np.max(np.abs(np.asarray(got[k]) - np.asarray(ref[k]))) < 1e-4


def test_tar_scan_matches_tarfile_with_long_names(data, tmp_path):
    """Shar members are located from the headers: our ustar fast path and the tarfile
    fallback (PAX headers for long or non-ASCII names) agree with tarfile itself."""
    import io
    import os

    from wenet_lhotse.sources.shar_audio import _TarScan

    tar = tmp_path / "x.tar"
    names = ["short.flac", "a" * 150 + ".flac", "b.c.flac", "ü-long" * 30 + ".flac", "d.json"]
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as tf:
        for name in names:
            blob = os.urandom(700)
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    for path in [tar, *sorted(data["shar"].glob("recording.*.tar"))]:
        with tarfile.open(path) as tf:
            ref = {m.name.rsplit(".", 1)[0]: (m.offset_data, m.size, m.name) for m in tf
                   if not m.name.endswith(".json")}
        scan = _TarScan(str(path))
        assert {k: scan.find(k) for k in reversed(list(ref))} == ref
        assert scan.find("absent") is None
