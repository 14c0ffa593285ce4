#!/usr/bin/env bash
# The demo: generate a WeNet-format corpus, import it, train single-process and with
# 2 DDP ranks, plot. No downloads; a few minutes on 2 CPU cores.
#   bash recipes/demo/run.sh [--quick] [-o OUT_DIR]
# Needs, in the wenet-lhotse clone: pip install -e ".[plot]" (without it: no demo.png).
set -euo pipefail
exec wenet-lhotse demo "$@"
