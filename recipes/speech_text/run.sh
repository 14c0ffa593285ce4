#!/usr/bin/env bash
# Speech + text-only training on one mixed stream (docs/mixing.md): a generated WeNet
# corpus for speech, its transcripts plus shuffled variants as a text-only source, the
# demo's CTC model plus a small text decoder. CPU, no downloads, a couple of minutes.
#   bash recipes/speech_text/run.sh [--epochs 2] [--num_utts 60]
# Needs: pip install -e . in the wenet-lhotse clone (no extra).
set -euo pipefail
cd "$(dirname "$0")"
epochs=2
num_utts=60
. ../parse_options.sh
mkdir -p data exp
wenet-lhotse corpus data/corpus -n "$num_utts" --min-duration 1 --max-duration 3 --seed 3
# the text-only source: every transcript, and each one's characters reversed (twice the
# text the speech has)
python - <<'PY'
import json
lines = [json.loads(x)["txt"] for x in open("data/corpus/data.list", encoding="utf-8")]
with open("data/corpus/lm.txt", "w", encoding="utf-8") as f:
    f.write("\n".join(lines + [t[::-1] for t in lines]) + "\n")
PY
python train.py --data data/corpus --epochs "$epochs" --out exp/history.json
