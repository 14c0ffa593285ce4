"""The guarantee matrix (issue 28): every input kind of the registry (raw list, WeNet
shards streamed, shards with their index, Shar, cuts manifest, Parquet file, ``datasets``
save_to_disk directory, NeMo manifest, text) x ranks {1, 2, 3} x DataLoader workers
{0, 2} x {one source, mixed with a second raw list}, under real torchrun (gloo, CPU),
two epochs: every readable utterance trained exactly once per epoch over the ranks, and
each epoch's ledgers exact (summed over the ranks: trained + skipped + filtered + left
over = the epoch; a missing wav is skipped, and counted, in every epoch, by the raw list
and the NeMo manifest that name it).

Text sources have no audio: they train text-only batches, mixed by batch with the speech
sources (``lhotse_conf.max_tokens_in_batch`` sizes them). "Once per epoch" for a text
source (not ``repeat``) is every line once per epoch, keyed ``file:line``, and counted in
the ledger as trained.

Resume cells, per kind x {one source, mixed}: a state saved mid-epoch 0 and restored on
the same world size (2 workers: batches prefetched past the saved one) and on another
(elastic, from W' = W mod 3 + 1 ranks: 2 -> 1, 3 -> 2, 1 -> 3; 0 workers) continues with
exactly the utterances not yet trained (first half + rest = the epoch, each once), and the
next epoch is whole.

One torchrun launch per world size walks all its cells in one process (cheap). A cell
that cannot hold is a documented refusal, tested as such (one line naming the cause):
streamed tar shards mixed with a raw list (streamed mode reads tar shards and Shar only;
``wenet-lhotse index`` the shards to mix them with a list); a streamed state resumed on
another world size (``world_size``: index the shards); a text source's state resumed
mid-epoch on another world size (``world_size``: resume from an epoch checkpoint).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lhotse import CutSet

from wenet_lhotse.convert.index import index_input
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list

HERE = Path(__file__).parent
SPEECH = ("raw", "shards", "indexed", "shar", "cuts")
ARROW = ("parquet", "datasets")  # need the `datasets` package (test extras)
EPOCHS = 2
N_TEXT = 40


def _has_datasets() -> bool:
    try:
        import datasets  # noqa: F401
    except ImportError:
        return False
    return True


KINDS = SPEECH + (ARROW if _has_datasets() else ()) + ("nemo", "text")


def _arrow_inputs(c, root: Path) -> dict:
    """The corpus as rows (id, WAV bytes, text): a Parquet file and a ``datasets``
    save_to_disk directory of two shards."""
    import datasets

    rows = [{"id": it["key"], "audio": {"bytes": Path(it["wav"]).read_bytes(), "path": None},
             "text": it["txt"]}
            for it in map(json.loads, c.data_list.read_text().splitlines())]
    ds = datasets.Dataset.from_list(rows).cast_column("audio", datasets.Audio(decode=False))
    (root / "parquet").mkdir()
    ds.to_parquet(str(root / "parquet" / "rows.parquet"))
    ds.save_to_disk(str(root / "hf"), num_shards=2)
    return {"parquet": root / "parquet" / "rows.parquet", "datasets": root / "hf"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    c = generate_corpus(root / "c", num_utterances=21, min_duration=0.3, max_duration=1.0,
                        shard_size=4, seed=8)
    m = generate_corpus(root / "m", num_utterances=7, min_duration=0.3, max_duration=1.0,
                        seed=9, prefix="mix-")
    cuts = CutSet.from_cuts(list(read_raw_list(c.data_list)))
    cuts.to_file(root / "cuts.jsonl.gz")
    (root / "shar").mkdir()
    cuts.to_shar(root / "shar", fields={"recording": "flac"}, shard_size=6)
    indexed = root / "indexed" / "shards.list"
    indexed.parent.mkdir()
    shutil.copy(c.shards_list, indexed)
    index_input(str(indexed))
    paths = {"shards": c.shards_list, "indexed": indexed, "shar": root / "shar",
             "cuts": root / "cuts.jsonl.gz"}
    if "parquet" in KINDS:
        paths.update(_arrow_inputs(c, root))
    # a NeMo manifest of the same wavs (relative paths: ids wav/<key>)
    items = [json.loads(line) for line in c.data_list.read_text().splitlines()]
    nemo = root / "c" / "nemo.json"
    nemo.write_text("".join(json.dumps({"audio_filepath": os.path.relpath(it["wav"], nemo.parent),
                                        "duration": 1.0, "text": it["txt"]}) + "\n"
                            for it in items))
    paths["nemo"] = nemo
    # text lines of the corpus's characters, keyed lm.txt:<line>
    chars = [line.split()[0] for line in c.units.read_text(encoding="utf-8").splitlines()
             if not line.startswith("<")]
    rng = random.Random(0)
    paths["text"] = root / "lm.txt"
    paths["text"].write_text("".join("".join(rng.choice(chars) for _ in range(
        rng.randint(2, 12))) + "\n" for _ in range(N_TEXT)), encoding="utf-8")
    # the raw list and the NeMo manifest miss one wav (a skip counted every epoch)
    raw = root / "raw.list"
    raw.write_text(c.data_list.read_text())
    paths["raw"] = raw
    (root / "c" / "wav" / f"{c.keys[2]}.wav").rename(root / "gone.wav")
    readable = {k: set(c.keys) for k in KINDS}
    readable["raw"] = set(c.keys) - {c.keys[2]}
    readable["nemo"] = {f"wav/{k}" for k in readable["raw"]}
    readable["text"] = {f"lm.txt:{i}" for i in range(1, N_TEXT + 1)}
    return {"paths": paths, "readable": readable, "mixed": m.data_list,
            "mixed_keys": set(m.keys), "units": c.units}


def _sources(inputs, kind: str, mixed: bool) -> list:
    src = [{"path": str(inputs["paths"][kind])}]
    if kind == "text":
        src[0]["type"] = "text"
    if mixed:
        src.append({"path": str(inputs["mixed"]), "weight": 0.5})
    return src


def _conf(kind: str) -> dict:
    return {"max_tokens_in_batch": 64} if kind == "text" else {}


def _cells(inputs, nproc: int):
    cells = []
    from_ws = nproc % 3 + 1
    for kind in KINDS:
        for mixed in (False, True):
            one = "mixed" if mixed else "one"
            for workers in (0, 2):
                cells.append({"name": f"{kind}-w{workers}-{one}", "kind": kind, "mixed": mixed,
                              "sources": _sources(inputs, kind, mixed), "lhotse_conf":
                              _conf(kind), "num_workers": workers, "epochs": EPOCHS})
            if kind == "shards" and mixed:  # refused at build (above)
                continue
            for ws, workers in ((nproc, 2), (from_ws, 0)):
                steps = 1 if ws == 3 else 2
                cells.append({"name": f"{kind}-{one}-resume-from{ws}", "kind": kind,
                              "mixed": mixed, "sources": _sources(inputs, kind, mixed),
                              "lhotse_conf": _conf(kind), "num_workers": workers,
                              "resume": {"from_ws": ws, "steps": steps}})
    return cells


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _expected(inputs, cell) -> tuple:
    kind = cell["kind"]
    expected = inputs["readable"][kind] | (inputs["mixed_keys"] if cell["mixed"] else set())
    return expected, (1 if kind in ("raw", "nemo") else 0)


def _check_epoch(name, epoch, eps, expected, skipped, nproc):
    trained = [k for g in eps for k in g["keys"]]
    assert len(trained) == len(set(trained)), f"{name} epoch {epoch}: a key twice"
    assert set(trained) == expected, f"{name} epoch {epoch}"
    leds = [g["ledger"] for g in eps]
    assert [x["epoch"] for x in leds] == [epoch] * nproc
    assert [(x["rank"], x["world_size"]) for x in leds] == [(r, nproc) for r in range(nproc)]
    assert sum(x["trained"] for x in leds) == len(expected), name
    assert sum(x["skipped"] for x in leds) == skipped, (name, epoch, leds)
    assert sum(x["total"] for x in leds) == len(expected) + skipped, name


def _check_resume(name, got, expected, skipped, nproc):
    first = [k for g in got for k in g["first"]]
    rest = [k for g in got for k in g["rest"]["keys"]]
    assert first and rest, f"{name}: not saved mid-epoch"
    both = first + rest
    assert len(both) == len(set(both)), f"{name}: a key in both halves or twice"
    assert set(both) == expected, f"{name}: the resumed epoch misses keys"
    for g in got:  # the resumed epoch's ledger counts what this run trained
        led = g["rest"]["ledger"]
        assert (led["epoch"], led["trained"]) == (0, len(g["rest"]["keys"])), (name, led)
    _check_epoch(name, 1, [g["next"] for g in got], expected, skipped, nproc)


REFUSALS = {  # (kind, elastic) -> the one line's words
    ("shards", True): "world_size: saved mid-epoch on",
    ("text", True): "a text source resumes mid-epoch only on the same number of ranks",
}


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_guarantee_matrix(inputs, tmp_path, nproc):
    cells = _cells(inputs, nproc)
    cfg = tmp_path / "cells.json"
    cfg.write_text(json.dumps(cells))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_matrix.py"), str(cfg), str(inputs["units"]), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
    for cell in cells:
        name, kind = cell["name"], cell["kind"]
        got = [r[name] for r in ranks]
        expected, skipped = _expected(inputs, cell)
        if "resume" in cell:
            elastic = cell["resume"]["from_ws"] != nproc
            words = REFUSALS.get((kind, elastic))
            if words is not None:  # the documented refusal, on every rank, in one line
                assert all(words in g.get("refused", "") for g in got), (name, got[0])
                assert all("\n" not in g["refused"] for g in got)
                assert all(g["refused"].startswith("bad resume state: world_size:")
                           for g in got)
                continue
            assert all("refused" not in g for g in got), (name, got[0])
            _check_resume(name, got, expected, skipped, nproc)
            continue
        if kind == "shards" and cell["mixed"]:  # the documented refusal, on every rank
            assert all("streamed mode reads tar shards" in g.get("refused", "") for g in got)
            assert all("\n" not in g["refused"] for g in got)
            continue
        assert all("refused" not in g for g in got), (name, got[0])
        for epoch in range(EPOCHS):
            _check_epoch(name, epoch, [g["epochs"][epoch] for g in got], expected, skipped,
                         nproc)
