"""docs/distributed.md's commands, in page order, against a real Dask scheduler with two
workers and moto's S3 server (all on 127.0.0.1): ``DASK_SCHEDULER``, ``BUCKET`` and the
AWS environment are what the page says to set. ``wenet-lhotse`` is the ``cli_bin``
fixture's (tests/cli_server.py: each command its own process, the imports paid once)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs_snippets import ROOT, steps

PAGE = ROOT / "docs" / "distributed.md"


@pytest.mark.slow
def test_distributed_page_commands_run(dask_cluster, s3, tmp_path, cli_bin):
    cmds = [c for k, c in steps(PAGE) if k == "sh"]
    assert any("--cluster $DASK_SCHEDULER" in c for c in cmds)
    env = dict(os.environ, **s3.env, DASK_SCHEDULER=dask_cluster.address, BUCKET=s3.bucket,
               PYTHONPATH=str(ROOT),
               PATH=f"{cli_bin}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    for cmd in cmds:
        res = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, f"`{cmd}` failed:\n{res.stdout}\n{res.stderr}"
    fs = s3.fs()
    names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{s3.bucket}/train/shar"))
    assert names == sorted([f"cuts.{i:06d}.jsonl.gz" for i in range(6)]
                           + [f"recording.{i:06d}.tar" for i in range(6)])
    manifest = gzip.decompress(fs.cat_file(f"{s3.bucket}/train/cuts.jsonl.gz")).splitlines()
    assert len(manifest) == 24
    assert len((tmp_path / "data" / "back.list").read_text().split()) == 24 // 1000 + 1
    raw = (tmp_path / "data" / "raw" / "data.list").read_text().splitlines()
    assert len(raw) == 24 and len(list((tmp_path / "data" / "raw" / "data_audio").iterdir())) == 24
    assert '"frame_num"' in (tmp_path / "data" / "global_cmvn").read_text()
