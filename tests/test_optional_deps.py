"""The core works when the optional packages are missing (torchaudio, sentencepiece,
matplotlib, s3fs, dask): each is made unimportable in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    for m in ("torchaudio", "sentencepiece", "matplotlib", "s3fs", "dask", "distributed"):
        sys.modules[m] = None  # `import m` now raises ImportError
    import torch
    import wenet_lhotse as wl

    cuts = wl.read_wenet_list(sys.argv[1])
    cut = next(iter(cuts))
    feats = wl.WenetFbank(wl.WenetFbankConfig(num_mel_bins=80)).extract(
        cut.load_audio(), cut.sampling_rate)
    assert feats.shape[1] == 80 and feats.shape[0] > 0
    tok = wl.CharTokenizer(sys.argv[2])
    assert tok.tokenize(cut.supervisions[0].text)[1]
    ds, loader = wl.build_dataloader(sys.argv[1], tok, {"fbank_conf": {"num_mel_bins": 80}},
                                     "cv", num_workers=0)
    batch = next(iter(loader))
    assert batch["feats"].dtype == torch.float32
    try:
        wl.BpeTokenizer("x.model", sys.argv[2])
    except ImportError as e:
        assert "sentencepiece" in str(e), e
    else:
        raise AssertionError("BpeTokenizer without sentencepiece must raise ImportError")
    from wenet_lhotse.convert.executor import ClusterError, map_tasks
    try:
        list(map_tasks(abs, [1], cluster="tcp://127.0.0.1:9"))
    except ClusterError as e:
        assert "pip install -e '.[cluster]'" in str(e), e
    else:
        raise AssertionError("--cluster without Dask must raise ClusterError")
    try:
        from wenet_lhotse.io.streams import open_input
        open_input("s3://bucket/x.tar")
    except wl.WenetDataError as e:
        assert str(e).startswith("s3://bucket/x.tar: cannot open this URL") and "s3fs" in str(e), e
    else:
        raise AssertionError("s3:// without s3fs must raise WenetDataError")
    print("OK")
""")


def test_core_without_optional_packages(corpus):
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(corpus.data_list), str(corpus.units)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]
