"""loader.dataloader: state_dict mid-epoch (map and streamed), restore in a fresh process,
without touching the audio of the skipped batches."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest
from lhotse import CutSet

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list, write_wenet_shards
from wenet_lhotse.loader.build import build_dataloader

CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 900},
        "lhotse_conf": {"num_buckets": 3, "buffer_size": 30}}


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


class AudioKeys:
    """Decodes every cut's audio, so a batch fails if its audio is unreadable."""

    def __getitem__(self, cuts):
        return [c.id for c in cuts if c.load_audio().size > 0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # A private corpus: one test makes some of its audio unreadable.
    root = tmp_path_factory.mktemp("resume")
    corpus = generate_corpus(root / "corpus", num_utterances=20, min_duration=1.0,
                             max_duration=4.0, seed=2)
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    cuts.to_file(root / "cuts.jsonl.gz")
    (root / "shar").mkdir()
    cuts.to_shar(root / "shar", fields={"recording": "flac"}, shard_size=7)
    shards = write_wenet_shards(cuts, root / "shards", shard_size=4,
                                list_path=root / "shards.list")
    return {"cuts": cuts, "manifest": root / "cuts.jsonl.gz", "shar": root / "shar",
            "raw": corpus.data_list, "root": root, "shards": shards}


def _sources(data, kind):
    if kind == "mux":
        return [{"path": str(data["manifest"]), "weight": 2, "tags": {"lang": "zh"}},
                {"path": str(data["raw"]), "type": "raw", "tags": {"lang": "en"}}]
    return str(data[kind])


@pytest.mark.parametrize("kind", ["manifest", "raw", "shar", "mux"])
@pytest.mark.parametrize("epoch", [0, 1])
def test_resume_in_process(data, kind, epoch):
    _, ref = build_dataloader(_sources(data, kind), None, CONF, "train", dataset=Keys(), seed=9)
    for _ in range(epoch):
        list(ref)
    expected = list(ref) + list(ref)  # this epoch and the next
    for k in (0, 1, len(expected) // 4):
        _, loader = build_dataloader(_sources(data, kind), None, CONF, "train", dataset=Keys(),
                                     seed=9)
        for _ in range(epoch):
            list(loader)
        it = iter(loader)
        for _ in range(k):
            next(it)
        sd = json.loads(json.dumps(loader.state_dict()))  # plain data
        _, fresh = build_dataloader(_sources(data, kind), None, CONF, "train", dataset=Keys(),
                                    seed=9)
        fresh.load_state_dict(sd)
        n_rest = len(expected) // 2 - k
        assert list(fresh) + list(fresh) == expected[k:k + n_rest] + expected[len(expected) // 2:]


def test_state_at_epoch_end_resumes_next_epoch(data):
    _, loader = build_dataloader(str(data["manifest"]), None, CONF, "train", dataset=Keys())
    list(loader)
    second = list(loader)
    _, loader = build_dataloader(str(data["manifest"]), None, CONF, "train", dataset=Keys())
    list(loader)
    _, fresh = build_dataloader(str(data["manifest"]), None, CONF, "train", dataset=Keys())
    fresh.load_state_dict(loader.state_dict())
    assert list(fresh) == second


SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from wenet_lhotse.loader.build import build_dataloader
    from tests.test_loader_dataloader import AudioKeys, CONF
    src, state_path, k, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    _, loader = build_dataloader(json.loads(src), None, CONF, "train", dataset=AudioKeys(),
                                 seed=4, num_workers=2, prefetch_factor=3)
    if k >= 0:  # first run: consume k batches (workers prefetch more), save the state
        it = iter(loader)
        [next(it) for _ in range(k)]
        torch.save(loader.state_dict(), state_path)
        rest = list(it)
    else:  # fresh process: restore
        loader.load_state_dict(torch.load(state_path))
        rest = list(loader)
    json.dump(rest, open(out, "w"))
""")


def _run(args, cwd):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("kind", ["manifest", "shar"])
def test_resume_in_fresh_process_never_touches_skipped_audio(data, kind, tmp_path, request):
    repo = request.config.rootpath
    src = json.dumps(_sources(data, kind))
    state = tmp_path / "state.pt"
    _run([src, state, 3, tmp_path / "first.json"], repo)
    first = json.loads((tmp_path / "first.json").read_text())
    # Make the audio of everything not in the remaining batches unreadable.
    later = {k for b in first for k in b}
    done = [c for c in data["cuts"] if c.id not in later]
    assert done
    if kind == "manifest":
        for c in done:
            p = c.recording.sources[0].source
            open(p, "wb").close()  # an empty file: decoding it fails
    else:
        ids = {c.id for c in done}
        for tar in data["shar"].glob("recording.*.tar"):
            with tarfile.open(tar) as tf:
                spans = [(m.offset_data, m.size) for m in tf
                         if m.name.rsplit(".", 1)[0] in ids and not m.name.endswith(".json")]
            with open(tar, "r+b") as f:
                for off, size in spans:
                    f.seek(off)
                    f.write(b"\0" * size)
    _run([src, state, -1, tmp_path / "second.json"], repo)
    assert json.loads((tmp_path / "second.json").read_text()) == first


def test_streamed_resume_continues_with_the_next_batch(data):
    shards = data["shards"]
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "streamed"}}
    _, ref = build_dataloader(str(shards), None, conf, "train", dataset=Keys(), seed=2)
    first = list(ref)
    expected = list(ref)  # epoch 1
    assert first != expected
    _, loader = build_dataloader(str(shards), None, conf, "train", dataset=Keys(), seed=2)
    list(loader)
    it = iter(loader)
    [next(it) for _ in range(2)]
    sd = loader.state_dict()
    assert sd["epoch"] == 1 and sd["consumed"] == 2
    _, fresh = build_dataloader(str(shards), None, conf, "train", dataset=Keys(), seed=2)
    fresh.load_state_dict(sd)
    assert list(fresh) == expected[2:]


@pytest.mark.parametrize("kind", ["manifest", "shards"])
def test_resume_twice(data, kind):
    """Save, restore, go on, save again (also right after restoring), restore again."""
    conf = CONF if kind == "manifest" else \
        {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "streamed"}}

    def make():
        return build_dataloader(str(data[kind]), None, conf, "train", dataset=Keys(),
                                seed=6)[1]

    ref = make()
    expected = list(ref) + list(ref)
    a = make()
    it = iter(a)
    got = [next(it) for _ in range(2)]
    b = make()
    b.load_state_dict(a.state_dict())
    c = make()
    c.load_state_dict(b.state_dict())  # saved before b was iterated
    it = iter(c)
    got += [next(it) for _ in range(3)]
    d = make()
    d.load_state_dict(c.state_dict())
    got += list(d)  # rest of epoch 0
    got += list(d)  # epoch 1
    assert got == expected


def test_streamed_resume_exact_after_a_worker_ran_out(data):
    """5 tars over 3 DataLoader workers: worker 2 (1 tar) runs out before the others (2
    tars each), after which the batch order is no longer round-robin. Resuming there
    still continues with exactly the batches that followed."""
    conf = {**CONF, "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 450},
            "lhotse_conf": {**CONF["lhotse_conf"], "mode": "streamed"}}  # small batches

    def make(num_workers=3):
        return build_dataloader(str(data["shards"]), None, conf, "train", dataset=Keys(),
                                seed=3, num_workers=num_workers)[1]

    expected = list(make())
    a = make()
    got, sd = [], None
    for batch in a:
        got.append(batch)
        counts = sorted(a.per_worker.values())
        if len(counts) == 3 and counts[-1] - counts[0] > 1 and len(got) < len(expected):
            sd = a.state_dict()  # the old round-robin arithmetic would be wrong here
            break
    assert sd is not None, "the corpus no longer makes one worker run out early"
    b = make()
    b.load_state_dict(sd)
    assert got + list(b) == expected
    with pytest.raises(ValueError, match="num_workers=3"):
        make(num_workers=1).load_state_dict(sd)


@pytest.mark.parametrize("mode", ["streamed", "map"])
def test_a_data_error_in_a_worker_is_raised_as_it_is(tmp_path, mode):
    """PyTorch re-raises a worker's WenetDataError as a RuntimeError carrying the worker's
    traceback; the loaders raise the error itself (one line naming the file)."""
    from wenet_lhotse.errors import WenetDataError
    from wenet_lhotse.text import CharTokenizer

    c = generate_corpus(tmp_path / "c", num_utterances=8, max_duration=2.0, shard_size=4,
                        seed=4)
    if mode == "streamed":  # strict: a tar of the list is missing
        src = tmp_path / "bad.list"
        src.write_text(f"{tmp_path / 'gone.tar'}\n" + c.shards_list.read_text())
        culprit = str(tmp_path / "gone.tar")
    else:
        src = c.data_list
        culprit = str(c.root / "wav" / f"{c.keys[0]}.wav")
    _, loader = build_dataloader(src, CharTokenizer(c.units), {"fbank_conf": {"num_mel_bins": 40}},
                                 "train", num_workers=2)
    if mode == "map":  # probed at build, then broken: the worker's decoding fails
        with open(culprit, "r+b") as f:
            f.truncate(30)
    with pytest.raises(WenetDataError) as err:
        list(loader)
    assert culprit in str(err.value) and "Traceback" not in str(err.value)


@pytest.mark.parametrize("mode", ["streamed", "map"])
def test_skips_reach_the_loader_whatever_the_dataset_returns(data, tmp_path, mode):
    """A dataset may return any batch (here a list of ids, not a dict): the items the
    reader skipped in a worker still reach ``loader.skip_report`` and the ledger."""
    if mode == "streamed":  # a tar of the list is gone: one skip, counted
        src = tmp_path / "bad.list"
        culprit = str(tmp_path / "gone.tar")
        src.write_text(f"{culprit}\n" + data["shards"].read_text())
    else:  # a Shar tar that lost one member: the skip is made when batches attach audio
        src = tmp_path / "shar"
        shutil.copytree(data["shar"], src)
        culprit = _drop_first_member(next(iter(sorted(src.glob("recording.*.tar")))))
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "fault_tolerant": True}}
    _, loader = build_dataloader(str(src), None, conf, "train", dataset=Keys(),
                                 num_workers=2, seed=3)
    got = [k for batch in loader for k in batch]
    assert all(isinstance(k, str) for k in got)
    assert len(loader.skip_report) == 1 and culprit in str(loader.skip_report.items[0])
    led = loader.epoch_ledger()
    assert led.skipped == 1 and led.trained == len(got)


def _drop_first_member(tar_path):
    """Rewrite a Shar tar without its first member; returns its cut id."""
    with tarfile.open(tar_path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(tar_path, "w") as tar:
        for m, payload in members[1:]:
            tar.addfile(m, io.BytesIO(payload))
    return members[0][0].name.split(".")[0]  # the cut id
