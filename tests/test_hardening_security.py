"""Nothing executed from data, no memory blow-up from forged tars, no unsafe name
carried into an output (issue 12, "Security")."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest
from adversarial import (
    REPO,
    add_sparse,
    add_special,
    cli,
    forged_size_tar,
    raw_line,
    tar_of,
    utt,
    wav_bytes,
    write_shard_list,
)

from wenet_lhotse import SkipReport, WenetDataError, open_cuts, read_raw_list, read_shard_list
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.io.policy import ReadPolicy


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """6 utterances: wavs, a raw list and 3 tars of 2."""
    return generate_corpus(tmp_path_factory.mktemp("small"), num_utterances=6,
                           min_duration=0.3, max_duration=0.6, shard_size=2, seed=21)


# --------------------------------------------------------------------- commands from data


def pipe_list(small, tmp_path, marker):
    """A shard list of `pipe:` lines that also touch ``marker`` when run."""
    tars = small.shards_list.read_text().split()
    lst = tmp_path / "pipes.list"
    lst.write_text("".join(f"pipe:touch {marker}; cat {t}\n" for t in tars))
    return lst


@pytest.mark.parametrize("command", ["validate", "stats", "import", "export"])
def test_a_text_file_is_not_a_command_list(tmp_path, command):
    """The issue's reproduction: a notes file with a `pipe:` line, given to any command,
    runs nothing and is refused as not a list."""
    marker = tmp_path / "PWNED"
    notes = tmp_path / "notes.txt"
    notes.write_text(f"notes\npipe:touch {marker}\n")
    args = {"validate": ["validate", notes], "stats": ["stats", notes],
            "import": ["import", notes, "--shar", tmp_path / "out"],
            "export": ["export", notes, "-o", tmp_path / "out.list"]}[command]
    res = cli(*args)
    assert res.returncode != 0
    assert not marker.exists()
    assert str(notes) in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


def test_pipe_lines_need_an_opt_in_python(small, tmp_path):
    marker = tmp_path / "ran"
    lst = pipe_list(small, tmp_path, marker)
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert e.value.source == str(lst) and e.value.line == 1 and e.value.kind == "refused"
    assert "allow_pipe" in str(e.value) and "\n" not in str(e.value)
    report = SkipReport()
    assert list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report))) == []
    assert [i.line for i in report] == [1, 2, 3] and report.counts() == {"refused": 3}
    assert not marker.exists()
    cuts = list(read_shard_list(lst, policy=ReadPolicy(allow_pipe=True)))
    assert [c.id for c in cuts] == small.keys and marker.exists()


def test_open_input_refuses_pipe_unless_allowed(tmp_path):
    from wenet_lhotse.io.streams import open_input

    marker = tmp_path / "ran"
    with pytest.raises(WenetDataError, match="allow_pipe") as e:
        open_input(f"pipe:touch {marker}")
    assert e.value.kind == "refused" and not marker.exists()
    with open_input("pipe:echo hi", policy=ReadPolicy(allow_pipe=True)) as f:
        assert f.read() == b"hi\n"


def test_pipe_lines_need_an_opt_in_cli(small, tmp_path):
    marker = tmp_path / "ran"
    lst = pipe_list(small, tmp_path, marker)
    res = cli("validate", lst)
    assert res.returncode == 1 and not marker.exists()
    assert f"{lst}:1: [refused]" in res.stdout and f"{lst}:3: [refused]" in res.stdout
    res = cli("import", lst, "--shar", tmp_path / "shar")
    assert res.returncode != 0 and not marker.exists()
    err = [ln for ln in res.stderr.splitlines() if ln.lower().startswith("error")]
    assert len(err) == 1 and f"{lst}:1" in err[0] and "--allow-pipe" in err[0]
    for args in (["validate", lst], ["stats", lst], ["import", lst, "--shar", tmp_path / "s2"],
                 ["export", lst, "-o", tmp_path / "x.list"]):
        cli(*args, "--allow-pipe", check=0)
    assert marker.exists()


def test_pipe_opt_in_from_yaml(small, tmp_path):
    from wenet_lhotse import CharTokenizer, build_dataloader

    marker = tmp_path / "ran"
    lst = pipe_list(small, tmp_path, marker)
    conf = {"fbank_conf": {"num_mel_bins": 23}}
    with pytest.raises(WenetDataError, match="allow_pipe"):
        _, loader = build_dataloader(lst, CharTokenizer(small.units), conf, "train")
        list(loader)
    assert not marker.exists()
    conf["lhotse_conf"] = {"allow_pipe": True}
    _, loader = build_dataloader(lst, CharTokenizer(small.units), conf, "train")
    assert sorted(k for b in loader for k in b["keys"]) == sorted(small.keys)


def test_command_sources_in_a_manifest_are_not_run(small, tmp_path):
    """A Lhotse manifest may hold ``AudioSource(type="command")``: Lhotse runs it through
    a shell when loading. Without the opt-in it is refused (file:line), never run."""
    marker = tmp_path / "ran"
    wav = small.root / "wav" / f"{small.keys[0]}.wav"
    cuts, _ = open_cuts(small.data_list)
    cut = next(iter(cuts))
    d = cut.to_dict()
    d["recording"]["sources"][0] = {"type": "command", "channels": [0],
                                    "source": f"touch {marker}; cat {wav}"}
    man = tmp_path / "cuts.jsonl"
    man.write_text(json.dumps(d) + "\n")
    res = cli("validate", man)
    assert res.returncode == 1 and f"{man}:1" in res.stdout and not marker.exists()
    with pytest.raises(WenetDataError, match="allow_pipe") as e:
        list(open_cuts(man)[0])
    assert e.value.line == 1 and not marker.exists()
    got = [c.load_audio().shape for c in open_cuts(man, policy=ReadPolicy(allow_pipe=True))[0]]
    assert len(got) == 1 and marker.exists()


# --------------------------------------------------------------------------- tar members


SPECIAL = {
    "symlink": lambda t: add_special(t, "u2.wav", tarfile.SYMTYPE, "/etc/passwd"),
    "hardlink": lambda t: add_special(t, "u2.wav", tarfile.LNKTYPE, "u1.wav"),
    "chardev": lambda t: add_special(t, "u2.wav", tarfile.CHRTYPE),
    "blockdev": lambda t: add_special(t, "u2.wav", tarfile.BLKTYPE),
    "fifo": lambda t: add_special(t, "u2.wav", tarfile.FIFOTYPE),
    "sparse": lambda t: add_sparse(t, "u2.wav", 1 << 20),
}


@pytest.mark.parametrize("case", sorted(SPECIAL))
def test_only_regular_members(tmp_path, case):
    data = tar_of(utt("u1") + [("u2.txt", b"two"), SPECIAL[case]] + utt("u3", 3))
    lst = write_shard_list(tmp_path, [data])
    tar = str(tmp_path / "shard0.tar")
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert (e.value.source, e.value.member, e.value.kind) == (tar, "u2.wav", "bad_member")
    report = SkipReport()
    cuts = list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in cuts] == ["u1", "u3"]
    assert ("u2.wav", "bad_member") in [(i.member, i.kind) for i in report]


def test_member_size_cap(tmp_path, monkeypatch):
    lst = write_shard_list(tmp_path, [tar_of(utt("u1") + utt("u2", 2))])
    size = len(wav_bytes())
    with pytest.raises(WenetDataError, match=f"over the {size - 1}-byte limit") as e:
        list(read_shard_list(lst, policy=ReadPolicy(max_member_bytes=size - 1)))
    assert e.value.member == "u1.wav" and e.value.kind == "bad_member"
    assert len(list(read_shard_list(lst, policy=ReadPolicy(max_member_bytes=size)))) == 2
    monkeypatch.setenv("WENET_LHOTSE_MAX_MEMBER_BYTES", str(size - 1))
    report = SkipReport()
    assert list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report))) == []
    # reading past an oversized member means reading what it claims: the tar ends there
    assert report.counts() == {"bad_member": 1}


def test_forged_sizes_never_allocate(tmp_path):
    """A 40 KB tar claiming 8 GiB (a plain member, and a sparse one) read by a process
    limited to 1 GiB of address space: both are bad members, the good tar is read."""
    forged = forged_size_tar("big.wav", 8 << 30, prefix=[("big.txt", b"x")])
    sparse = tar_of([("s.txt", b"x"), lambda t: add_sparse(t, "s.wav", 8 << 30)])
    good = tar_of(utt("ok"))
    lst = write_shard_list(tmp_path, [forged, sparse, good])
    assert len(forged) < 50_000 and len(sparse) < 50_000
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from wenet_lhotse import SkipReport, read_shard_list
from wenet_lhotse.io.policy import ReadPolicy
r = SkipReport()
ids = [c.id for c in read_shard_list({str(lst)!r}, policy=ReadPolicy(strict=False, skip_report=r))]
print(ids, sorted((i.member, i.kind) for i in r))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert "['ok']" in res.stdout
    assert "('big.wav', 'bad_member')" in res.stdout and "('s.wav', 'bad_member')" in res.stdout


# --------------------------------------------------------------------------- unsafe keys


UNSAFE_KEYS = {
    "dotdot": "../../etc/x",
    "absolute": "/abs/k",
    "nul": "a\x00b",
    "control": "a\x1b[2Jb",
    "too_long": "k" * 300,
    "too_long_utf8": "\u4e2d" * 90,  # 270 bytes in UTF-8
    "lone_surrogate": "a\ud800",
}


@pytest.mark.parametrize("case", sorted(UNSAFE_KEYS))
def test_unsafe_keys_in_raw_lists(small, tmp_path, case):
    wav = str(small.root / "wav" / f"{small.keys[0]}.wav")
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="ok1", wav=wav, txt="a") + "\n"
                   + raw_line(key=UNSAFE_KEYS[case], wav=wav, txt="b") + "\n"
                   + raw_line(key="ok2", wav=wav, txt="c") + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.source, e.value.line, e.value.kind) == (str(lst), 2, "unsafe_key")
    assert "\n" not in str(e.value)
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_raw_list(lst,
                                        policy=policy)] == ["ok1",
                                                                                    "ok2"]
    assert report.counts() == {"unsafe_key": 1}


@pytest.mark.parametrize("name", ["../../etc/x", "/abs/k", "k" * 260, "a\x07b"],
                         ids=["dotdot", "absolute", "too_long", "control"])
def test_unsafe_member_names_in_tars(tmp_path, name):
    data = tar_of(utt("u1") + [(f"{name}.txt", b"x"), (f"{name}.wav", wav_bytes())]
                  + utt("u3", 3))
    lst = write_shard_list(tmp_path, [data])
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert e.value.kind == "unsafe_key" and e.value.member == f"{name}.txt"
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_shard_list(lst, policy=policy)] == ["u1",
                                                                                      "u3"]
    assert set(report.counts()) == {"unsafe_key"}


def _cut_with_id(small, cut_id):
    from lhotse import Recording, SupervisionSegment

    rec = Recording.from_file(str(small.root / "wav" / f"{small.keys[0]}.wav"),
                              recording_id=cut_id)
    cut = rec.to_cut()
    cut.supervisions = [SupervisionSegment(cut_id, cut_id, 0, rec.duration, text="t")]
    return cut


@pytest.mark.parametrize("cut_id", ["../../evil", "/abs/evil", "e\x00vil"],
                         ids=["dotdot", "absolute", "nul"])
def test_unsafe_ids_are_never_written(small, tmp_path, cut_id):
    from lhotse import CutSet

    from wenet_lhotse import write_raw_list, write_wenet_shards

    cuts = CutSet.from_cuts([_cut_with_id(small, "fine"), _cut_with_id(small, cut_id)])
    with pytest.raises(WenetDataError, match="unsafe"):
        write_wenet_shards(cuts, tmp_path / "shards", shard_size=10)
    assert not list((tmp_path / "shards").glob("*.tar"))
    with pytest.raises(WenetDataError, match="unsafe"):
        write_raw_list(cuts, tmp_path / "d.list", audio_dir=tmp_path / "audio")
    assert not (tmp_path / "d.list").exists()
    # A manifest holding such an id is refused when read, naming its line.
    man = tmp_path / "cuts.jsonl"
    cuts.to_file(man)
    res = cli("export", man, "--shards", tmp_path / "s2")
    assert res.returncode != 0 and f"{man}:2" in res.stderr
    assert not list(tmp_path.rglob("evil*"))


def test_lone_surrogate_text_is_bad_input(small, tmp_path):
    wav = str(small.root / "wav" / f"{small.keys[0]}.wav")
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="ok", wav=wav, txt="fine") + "\n"
                   + raw_line(key="bad", wav=wav, txt="a\ud800") + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.line, e.value.kind) == (2, "encoding")
    res = cli("import", lst, "-o", tmp_path / "cuts.jsonl.gz")
    assert res.returncode == 1 and f"{lst}:2" in res.stderr
    assert "UnicodeEncodeError" not in res.stderr and "Traceback" not in res.stderr
    res = cli("import", lst, "--shar", tmp_path / "shar", "--skip-errors", check=0)
    assert "1 skipped" in res.stdout
    cli("export", tmp_path / "shar", "-o", tmp_path / "back.list", check=0)
    assert len((tmp_path / "back.list").read_text().splitlines()) == 1
    # the same text in a Lhotse manifest: named by file and line
    cut = _cut_with_id(small, "sur")
    d = cut.to_dict()
    d["supervisions"][0]["text"] = "a\ud800"
    man = tmp_path / "cuts.jsonl"
    man.write_text(json.dumps(d) + "\n")
    with pytest.raises(WenetDataError) as e:
        list(open_cuts(man)[0])
    assert (e.value.source, e.value.line, e.value.kind) == (str(man), 1, "encoding")


def test_long_but_valid_keys_export(tmp_path):
    """A 250-byte key is valid (its member names fit in 255 bytes); exporting in-memory
    audio under it still gets a file name the filesystem accepts."""
    key = "k" * 120 + "\u4e2d" * 43  # 249 bytes
    lst = write_shard_list(tmp_path, [tar_of(utt(key) + utt("short", 1))])
    res = cli("export", lst, "-o", tmp_path / "out" / "data.list", check=0)
    assert "raw list" in res.stdout
    lines = (tmp_path / "out" / "data.list").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["key"] for x in lines] == [key, "short"]
    assert all(len(p.name.encode()) <= 255 for p in (tmp_path / "out").rglob("*"))
