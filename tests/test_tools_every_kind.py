"""Every tool learns every kind (issue 31): ``import``, ``validate``, ``stats``,
``export`` and ``index`` run on an input of each registered kind, or refuse it in one
line that names what to do instead (the command, option or yaml key that does it); no
traceback, no binary bytes in any message (issue 32, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
from click.testing import CliRunner

from wenet_lhotse.cli import main
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.sources.registry import kinds

pytest.importorskip("pyarrow")

#: What each tool is asked, with ``{out}`` a fresh path.
TOOLS = {
    "import -o": ["import", "{src}", "-o", "{out}/cuts.jsonl.gz"],
    "import --shar": ["import", "{src}", "--shar", "{out}/shar", "--audio-format", "copy"],
    "validate": ["validate", "{src}"],
    "stats": ["stats", "{src}", "--json"],
    "export": ["export", "{src}", "-o", "{out}/data.list"],
    "export --shards": ["export", "{src}", "--shards", "{out}/sh", "-o", "{out}/sh.list"],
    "index": ["index", "{src}", "--cache-dir", "{out}/cache"],
}
#: What a refusal names: a command, an option or a yaml key that does it.
NAMES_THE_WAY = ("`wenet-lhotse", "--shar", "type: ", "`index`", "nothing to index")
#: The kind x tool pairs that must work (exit 0); the others may refuse in one line.
MUST_WORK = {(k, t) for k in ("raw", "shard", "cuts", "shar", "parquet", "nemo")
             for t in ("validate", "stats", "export", "export --shards")}
MUST_WORK |= {("raw", "import -o"), ("shard", "import --shar"), ("cuts", "import --shar"),
              ("parquet", "import --shar"), ("nemo", "import -o"), ("nemo", "import --shar"),
              ("shard", "index")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One input of every registered kind, all of the same 4 utterances."""
    root = tmp_path_factory.mktemp("kinds")
    c = generate_corpus(root / "c", num_utterances=4, min_duration=0.3, max_duration=0.6,
                        shard_size=2, seed=3)
    made = {"raw": c.data_list, "shard": c.shards_list}
    run("import", c.data_list, "-o", root / "cuts.jsonl.gz")
    made["cuts"] = root / "cuts.jsonl.gz"
    run("import", c.shards_list, "--shar", root / "shar")
    made["shar"] = root / "shar"
    made["text"] = root / "sentences.txt"
    made["text"].write_text("a sentence\nanother one\n", encoding="utf-8")
    run("parquet-export", c.data_list, root / "train.parquet")
    made["parquet"] = root / "train.parquet"
    lines = [json.dumps({"audio_filepath": o["wav"], "duration": sf.info(o["wav"]).duration,
                         "text": o["txt"]})
             for o in map(json.loads, c.data_list.read_text(encoding="utf-8").splitlines())]
    made["nemo"] = root / "manifest.json"
    made["nemo"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return made


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_the_fixture_has_every_registered_kind(inputs):
    assert set(inputs) == {k.name for k in kinds()}


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("kind", [k.name for k in kinds()])
def test_each_tool_takes_each_kind_or_says_what_does(inputs, tmp_path, kind, tool):
    args = [a.format(src=inputs[kind], out=tmp_path) for a in TOOLS[tool]]
    res = run(*args)
    text = res.output
    assert "Traceback" not in text and all(" " <= ch or ch in "\r\n\t" for ch in text), text
    if (kind, tool) in MUST_WORK:
        assert res.exit_code == 0, f"{kind} x {tool}: {text}"
        if tool in ("validate",):
            assert "4 utterances OK" in text, text
        return
    if res.exit_code == 0:
        return  # also works
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if tool == "validate":  # a report: the problem, then the counts
        lines = lines[:1]
    assert len(lines) == 1, f"{kind} x {tool}: {text}"
    assert any(way in lines[0] for way in NAMES_THE_WAY), f"{kind} x {tool}: {lines[0]}"


def test_parquet_is_named_for_what_it_is(inputs, tmp_path):
    res = run("import", inputs["parquet"], "-o", tmp_path / "c.jsonl.gz")
    assert res.exit_code == 1 and "parquet input" in res.output
    assert "--shar DIR" in res.output and "`wenet-lhotse parquet-import`" in res.output
    res = run("index", inputs["parquet"])
    assert "`wenet-lhotse parquet-import` it, then `index`" in res.output
    res = run("stats", inputs["parquet"], "--json")
    assert json.loads(res.output)["kind"] == "parquet"


def test_a_binary_file_that_is_no_input_is_quoted_as_printable_ascii(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x89PNG\r\x1a\x00\x15\xd0\x0f\xfe" * 8 + b"\n")
    res = run("validate", junk)
    assert res.exit_code != 0 and "not an input: its first line '?PNG" in res.output
    assert all(" " <= ch <= "~" or ch == "\n" for ch in res.output), repr(res.output)
    assert Path(junk).exists()
