"""``make-units`` against WeNet's recipes (their stage-2 pipeline, run here with WeNet's
own tools/text2token.py and tools/spm_encode) and WeNet's tokenizer loading
(``init_tokenizer`` with the recipe yamls' ``tokenizer_conf``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from click.testing import CliRunner
from guards import guarded_import

from wenet_lhotse.cli import main

# aishell-like transcripts (the recipe removes spaces first) plus a few latin letters
TEXT = "".join(f"utt{i:02d} {t}\n" for i, t in enumerate([
    "甚至出现交易几乎停滞的情况", "一二线城市虽然也处于调整中", "但因为聚集了过多公共资源",
    "为了规避三四线城市明显过剩的市场风险", "标杆房企必然调整市场战略", "ABC的房价",
    "下跌了百分之十"]))


def _recipe_char_table(wenet_root, text) -> str:
    """WeNet's aishell run.sh stage 2, verbatim but for the paths."""
    script = f"""
        set -e -o pipefail
        export LC_ALL=C
        dict=$1
        echo "<blank> 0" > ${{dict}}  # 0 is for "blank" in CTC
        echo "<unk> 1"  >> ${{dict}}  # <unk> must be 1
        echo "<sos/eos> 2" >> $dict
        {sys.executable} {wenet_root}/tools/text2token.py -s 1 -n 1 {text} | cut -f 2- -d" " \\
          | tr " " "\\n" | sort | uniq | grep -a -v -e '^\\s*$' | \\
          awk '{{print $0 " " NR+2}}' >> ${{dict}}
    """
    out = text.parent / "recipe_lang_char.txt"
    subprocess.run(["bash", "-c", textwrap.dedent(script), "recipe", str(out)], check=True)
    return out.read_text(encoding="utf-8")


def test_char_table_equals_wenet_aishell_recipe(tmp_path, wenet_root):
    text = tmp_path / "text"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "lang_char.txt"
    res = CliRunner().invoke(main, ["make-units", str(text), "-o", str(out)])
    assert res.exit_code == 0, res.output
    ours = out.read_text(encoding="utf-8")
    assert ours == _recipe_char_table(wenet_root, text)
    assert ours.splitlines()[:4] == ["<blank> 0", "<unk> 1", "<sos/eos> 2", "A 3"]


def test_old_layout_puts_sos_eos_last(tmp_path):
    text = tmp_path / "text"
    text.write_text(TEXT, encoding="utf-8")
    new, old = tmp_path / "new.txt", tmp_path / "old.txt"
    for out, extra in ((new, []), (old, ["--sos-eos-last"])):
        res = CliRunner().invoke(main, ["make-units", str(text), "-o", str(out), *extra])
        assert res.exit_code == 0, res.output
    new_units = [line.split()[0] for line in new.read_text(encoding="utf-8").splitlines()]
    old_lines = old.read_text(encoding="utf-8").splitlines()
    assert old_lines[:2] == ["<blank> 0", "<unk> 1"]
    assert old_lines[-1] == f"<sos/eos> {len(old_lines) - 1}"
    assert [line.split()[0] for line in old_lines[2:-1]] == new_units[3:]


_LOAD = """
import json, sys, yaml
from wenet.utils.init_tokenizer import init_tokenizer
conf_path, table, bpe, texts = sys.argv[1:5]
configs = yaml.safe_load(open(conf_path))
configs["tokenizer_conf"]["symbol_table_path"] = table
if bpe != "-":
    configs["tokenizer_conf"]["bpe_path"] = bpe
tok = init_tokenizer(configs)
ids = [tok.tokenize(t)[1] for t in json.loads(texts)]
print(json.dumps({"table": tok.symbol_table, "vocab_size": tok.vocab_size(), "ids": ids,
                  "special": configs["tokenizer_conf"]["special_tokens"]}))
"""


def _wenet_tokenize(conf, table, bpe, texts):
    from wenet_harness import wenet_env

    res = subprocess.run([sys.executable, "-c", _LOAD, str(conf), str(table), str(bpe or "-"),
                          json.dumps(texts)], env=wenet_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _check_loaded(got, texts, tokenizer):
    special = got["special"]
    table = got["table"]
    assert special == {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}
    assert table["<blank>"] == 0 and table["<unk>"] == 1
    assert table["<sos/eos>"] == special["<sos>"] == special["<eos>"]
    assert got["vocab_size"] == len(table)
    # Every transcript maps to ordinary units only, and the same ids as our tokenizer.
    for text, ids in zip(texts, got["ids"]):
        assert ids and not set(ids) & {0, 1, 2}, text
        assert ids == tokenizer.tokenize(text)[1]


def test_char_table_loads_in_wenet_as_the_aishell_yaml_expects(tmp_path, wenet_root):
    from wenet_lhotse.text import CharTokenizer

    text = tmp_path / "text"
    text.write_text(TEXT, encoding="utf-8")
    table = tmp_path / "lang_char.txt"
    assert CliRunner().invoke(main, ["make-units", str(text), "-o", str(table)]).exit_code == 0
    texts = [line.split(maxsplit=1)[1] for line in TEXT.splitlines()]
    conf = wenet_root / "examples/aishell/s0/conf/train_conformer.yaml"
    got = _wenet_tokenize(conf, table, None, texts)
    _check_loaded(got, texts, CharTokenizer(str(table)))


def test_bpe_table_equals_wenet_librispeech_recipe_and_loads(tmp_path, wenet_root):
    guarded_import("sentencepiece")
    from wenet_lhotse.text import BpeTokenizer

    words = ["THE QUICK BROWN FOX", "JUMPS OVER THE LAZY DOG", "A TALE OF TWO CITIES",
             "IT WAS THE BEST OF TIMES", "IT WAS THE WORST OF TIMES", "CALL ME ISHMAEL"]
    text = tmp_path / "text"
    text.write_text("".join(f"u{i} {w}\n" for i, w in enumerate(words * 3)), encoding="utf-8")
    table, prefix = tmp_path / "units.txt", tmp_path / "bpe"
    res = CliRunner().invoke(main, ["make-units", str(text), "-o", str(table), "--bpe", "40",
                                    "--bpe-model-prefix", str(prefix)])
    assert res.exit_code == 0, res.output
    # WeNet's librispeech run.sh stage 2 with our model: spm_encode | sort | uniq | NR+2
    (tmp_path / "input.txt").write_text("".join(f"{w}\n" for w in words * 3), encoding="utf-8")
    script = textwrap.dedent(f"""
        set -e -o pipefail
        export LC_ALL=C
        dict=$1
        echo "<blank> 0" > ${{dict}}
        echo "<unk> 1" >> ${{dict}}
        echo "<sos/eos> 2" >> $dict
        {sys.executable} {wenet_root}/tools/spm_encode --model={prefix}.model \\
          --output_format=piece < {tmp_path}/input.txt | \\
          tr ' ' '\\n' | sort | uniq | awk '{{print $0 " " NR+2}}' >> ${{dict}}
    """)
    recipe = tmp_path / "recipe_units.txt"
    subprocess.run(["bash", "-c", script, "recipe", str(recipe)], check=True)
    assert table.read_text(encoding="utf-8") == recipe.read_text(encoding="utf-8")
    conf = wenet_root / "examples/librispeech/s0/conf/train_conformer.yaml"
    got = _wenet_tokenize(conf, table, f"{prefix}.model", words)
    _check_loaded(got, words, BpeTokenizer(f"{prefix}.model", str(table)))
