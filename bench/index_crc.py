"""The cost of the shard index's per-member CRC-32 (a tar edited in place is never read as
other bytes): index build time and read-by-offset time, with and without the CRC, side
by side in one run.

Set-up: a generated corpus (``--utts`` utterances of 1-6 s, 16 kHz 16-bit WAV) as WeNet
shards of 20 (local files, in the page cache after the first pass);

1. indexing every tar (``index_tar``, one process), with the CRC (as shipped) and with
   ``zlib.crc32`` replaced by a stub returning 0 (no CRC), alternated ``--rounds`` times:
   the best seconds of each and their ratio;
2. reading every indexed member by offset (``read_members``, one call per tar: what
   the audio attacher does for a batch), with the CRC checked and without (CRC None),
   alternated: microseconds per member and the ratio;
3. ``zlib.crc32`` alone over the same member bytes: MB/s; next to it, decoding the same
   members (``soundfile.read`` of the WAV bytes), the least work a training read does.

Run: ``python bench/index_crc.py [--utts 400] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
import zlib
from pathlib import Path

import _paths  # noqa: F401  (the repository root)
import soundfile
from lhotse import CutSet

import wenet_lhotse.formats.tar_index as tar_index
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list, write_wenet_shards
from wenet_lhotse.formats.member_reads import read_members
from wenet_lhotse.formats.tar_index import index_tar


class _NoCrc:
    """``zlib`` as ``tar_index`` uses it, without the CRC."""

    @staticmethod
    def crc32(data: bytes) -> int:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utts", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = generate_corpus(root / "c", num_utterances=args.utts, min_duration=1.0,
                                 max_duration=6.0, seed=0)
        cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
        lst = write_wenet_shards(cuts, root / "shards", shard_size=20,
                                 list_path=root / "shards.list")
        tars = Path(lst).read_text().split()
        build = {"crc": [], "none": []}
        rows = {}
        for _ in range(args.rounds):
            for how in ("crc", "none"):
                tar_index.zlib = zlib if how == "crc" else _NoCrc  # type: ignore
                t0 = time.perf_counter()
                got = [index_tar(t) for t in tars]
                build[how].append(time.perf_counter() - t0)
                if how == "crc":
                    rows = {t: r for t, r in zip(tars, got)}
        tar_index.zlib = zlib  # type: ignore
        members = {t: [(f"{k}.{f}", o, s, c) for k, f, o, s, c in
                       zip(r.keys, r.fmts, r.offsets, r.sizes, r.crcs)]
                   for t, r in rows.items()}
        n = sum(len(m) for m in members.values())
        nbytes = sum(s for m in members.values() for _, _, s, _ in m)
        read = {"crc": [], "none": []}
        for _ in range(args.rounds):
            for how in ("crc", "none"):
                t0 = time.perf_counter()
                for t, m in members.items():
                    asked = m if how == "crc" else [(a, b, c, None) for a, b, c, _ in m]
                    out = read_members(t, asked)
                    assert all(isinstance(v, bytes) for v in out.values())
                read[how].append(time.perf_counter() - t0)
        datas = [v for t, m in members.items() for v in read_members(t, m).values()]
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            for d in datas:
                zlib.crc32(d)
        crc_s = (time.perf_counter() - t0) / args.rounds
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            for d in datas:
                soundfile.read(io.BytesIO(d), dtype="int16")
        decode_s = (time.perf_counter() - t0) / args.rounds
    b = {k: min(v) for k, v in build.items()}
    r = {k: min(v) for k, v in read.items()}
    print(f"corpus: {n} utterances, {len(tars)} tars, {nbytes / 1e6:.1f} MB of audio "
          f"({nbytes / n / 1e3:.0f} KB per member); best of {args.rounds}")
    print(f"index build: with CRC {b['crc']:.3f} s, without {b['none']:.3f} s, "
          f"ratio {b['crc'] / b['none']:.3f}")
    print(f"read by offset: with CRC {r['crc'] / n * 1e6:.1f} us/member, without "
          f"{r['none'] / n * 1e6:.1f} us/member, ratio {r['crc'] / r['none']:.3f}")
    print(f"zlib.crc32 alone: {nbytes / crc_s / 1e6:.0f} MB/s "
          f"({crc_s / n * 1e6:.1f} us/member); decoding the members: "
          f"{decode_s / n * 1e6:.1f} us/member")


if __name__ == "__main__":
    main()
