"""Run by torchrun from tests/test_probe_cache.py: one rank probing its share of a raw
list (gloo, CPU). Usage: ddp_probe.py LIST OUT_DIR; writes OUT_DIR/rank<r>.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse.sources.probe_cache import probed_raw_list


def main() -> None:
    lst, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    res = probed_raw_list(lst)
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(
        {"manifest": str(res.manifest), "from_cache": res.from_cache,
         "lines_probed": res.lines_probed}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
