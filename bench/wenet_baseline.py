"""WeNet's own training loader vs ours through the drop-in, side by side.

Same generated corpus (raw list and tar shards, in RAM when ``/dev/shm`` exists), same
``dataset_conf`` (WeNet's aishell train augmentation: speed perturbation 0.9/1.0/1.1,
fbank 80, dither 0.1, spec_aug 2x50 frames / 2x10 bins; static batches of 16, shuffle
1500, sort 500), same tokenizer table, same number of DataLoader workers and cores, and
a separate cv set of 1/25 the size (``--cv_data``; both build a cv loader, only the train
loader is iterated):

* **WeNet**: ``wenet.utils.train_utils.init_dataset_and_dataloader`` from the snapshot
  at ``$WENET_ROOT`` (default ``../shared/wenet``), run with the stand-ins of
  ``wenet_harness`` for what cannot install here (torchaudio's IO, deepspeed).
  WeNet's ``speed_perturb`` calls ``torchaudio.sox_effects``: where libsox and
  ``soxbindings`` are installed (``apt-get install libsox-dev; pip install
  soxbindings``) the harness runs WeNet's effect chain through libsox itself, and the
  rows say "yes (libsox)"; otherwise through its stand-in (torchaudio's sinc resampler,
  sr*speed -> sr, cheaper than sox), "yes (stand-in)". Rows without speed perturbation
  compare WeNet's real code only; ``bench/speed_perturb.py`` compares our speed
  perturbation with libsox's and libsoxr's.
* **ours**: ``wenet_lhotse.dropin.compat.init_dataset_and_dataloader`` (the drop-in) with
  the same arguments; ``lhotse_conf`` only where a row says so.

Each run is one epoch of the train loader in a fresh process; runs alternate between the
pipelines (round-robin, ``--rounds`` times) and medians are printed. Per run: audio
seconds per wall second (audio = feature frames x 10 ms, i.e. after speed
perturbation, the same for both), time from building the loader to the first batch,
CPU seconds per audio hour over the whole process tree (psutil: main process and
DataLoader workers, from building the loader to the end of the epoch, taken while the
persistent workers are alive; start-up -- imports, and langid's model, which WeNet
loads when its processor is imported -- is not counted on either side), the main
process's share of it, padding (padded frames / all frames) and PSS of the tree.

``--old-tree DIR`` adds an "ours (old tree)" row per data type and speed setting: the
drop-in of another checkout of this repository (e.g. ``git worktree add DIR <commit>``),
run by that tree's own copy of this script with only ``DIR`` on ``PYTHONPATH``, on the
same corpus and ``dataset_conf``, alternated with the other rows, so that machine load
falls on both trees alike; the ratios of this tree to the old one are printed.

Run: ``python bench/wenet_baseline.py [--num-utts 800] [--rounds 2] [--workers 2]``;
``--quick`` for a smoke run; ``--no-wenet`` leaves WeNet's rows out. Without WeNet's
source the WeNet rows are skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]

def aishell_conf() -> Dict[str, Any]:
    """WeNet's aishell train ``dataset_conf`` (examples/aishell/s0/conf), as the
    ``wenet-lhotse bench`` command uses it."""
    from wenet_lhotse.cli.bench_cmd import AISHELL_DATASET_CONF

    return json.loads(json.dumps(AISHELL_DATASET_CONF))


def drop_in_args(corpus: Path, data_type: str, workers: int
                 ) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """WeNet's ``train.py`` arguments and yaml dataset_conf for the corpus (``conf.json``
    written by :func:`make_corpus`): train on the corpus, cv on its small cv set."""
    conf = json.loads((corpus / "conf.json").read_text())
    conf["speaker_conf"] = {"speaker_table_path": str(corpus / "speakers.txt")}
    name = "data.list" if data_type == "raw" else "shards.list"
    args = argparse.Namespace(train_data=str(corpus / name), cv_data=str(corpus / "cv" / name),
                              data_type=data_type, num_workers=workers, pin_memory=False,
                              prefetch=2)
    return args, conf


def preload_langid() -> None:
    """Load langid's model before the clock starts, as a start-up cost like the imports:
    WeNet's ``processor.py`` loads it when imported; ours on the first loader build."""
    try:
        from wenet_lhotse.dataset.langid import WenetLangId
    except ImportError:  # a tree without WeNet's language detection
        return
    WenetLangId().preload()


def tree_usage() -> Dict[str, float]:
    """CPU seconds (user + system) and PSS (MiB) of this process and its descendants."""
    import psutil

    me = psutil.Process()
    procs = [me] + me.children(recursive=True)
    cpu = pss = 0.0
    t = me.cpu_times()
    main = t.user + t.system
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            pss += p.memory_full_info().pss / 2**20
        except psutil.Error:
            pass
    return {"cpu": cpu, "pss": pss, "main": main}


def child(which: str, corpus: Path, data_type: str, workers: int, speed: bool,
          lconf: Optional[Dict[str, Any]]) -> None:
    import torch

    torch.set_num_threads(1)
    args, conf = drop_in_args(corpus, data_type, workers)
    conf["speed_perturb"] = speed
    if which == "wenet":
        from wenet_harness import import_wenet

        train_utils, char_tok = import_wenet("wenet.utils.train_utils",
                                             "wenet.text.char_tokenizer")
        init = train_utils.init_dataset_and_dataloader
        tokenizer = char_tok.CharTokenizer(str(corpus / "units.txt"))
    else:
        from wenet_lhotse.dropin.compat import init_dataset_and_dataloader as init
        from wenet_lhotse.text import CharTokenizer

        if lconf:
            conf["lhotse_conf"] = lconf
        tokenizer = CharTokenizer(corpus / "units.txt")
        preload_langid()
    use0 = tree_usage()  # interpreter start-up and imports are not counted
    t0 = time.perf_counter()
    _, _, loader, _ = init(args, {"dataset_conf": conf}, tokenizer, 777)
    first = None
    frames = padded = batches = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        lens = batch["feats_lengths"]
        frames += int(lens.sum())
        padded += int(lens.numel()) * int(batch["feats"].shape[1])
        batches += 1
    wall = time.perf_counter() - t0
    use = tree_usage()  # persistent workers are still alive here
    print(json.dumps({"audio": frames / 100.0, "wall": wall, "first": first,
                      "cpu": use["cpu"] - use0["cpu"], "main": use["main"] - use0["main"],
                      "pss": use["pss"], "padding": 1 - frames / max(padded, 1),
                      "batches": batches}))


def run_child(which: str, corpus: Path, data_type: str, workers: int, speed: bool,
              lconf: Optional[Dict[str, Any]], old_tree: Optional[Path] = None
              ) -> Dict[str, float]:
    """One epoch in a fresh process. ``which == "old"``: ours from ``old_tree``, run by
    that tree's copy of this script with only that tree on ``PYTHONPATH``."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    script = __file__
    if which == "wenet":
        from wenet_harness import wenet_env

        env = wenet_env(env)
    elif which == "old":
        assert old_tree is not None
        env["PYTHONPATH"] = str(old_tree)
        script, which = str(old_tree / "bench" / "wenet_baseline.py"), "ours"
    else:  # our side runs without the stand-ins on its path
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, script, "--child", which, str(corpus), data_type, str(workers),
           str(int(speed)), json.dumps(lconf or {})]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{which} {data_type} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_corpus(root: Path, num_utts: int) -> Path:
    """The train corpus (raw list and ~8 shards) under ``root``, a cv corpus of 1/25 of
    its size under ``root/cv`` (cv sets are small; WeNet builds its cv loader lazily and
    ours reads its metadata at start), a speaker table, and ``conf.json``."""
    from wenet_lhotse.corpus import generate_corpus

    corpus = generate_corpus(root, num_utterances=num_utts, min_duration=1.0,
                             max_duration=15.0, duration_dist="realistic",
                             shard_size=max(10, num_utts // 8), seed=3)
    n_cv = max(8, num_utts // 25)
    generate_corpus(root / "cv", num_utterances=n_cv, min_duration=1.0, max_duration=15.0,
                    duration_dist="realistic", shard_size=n_cv, seed=4, prefix="cv-")
    speakers = sorted({json.loads(line).get("speaker", "")
                       for line in corpus.data_list.read_text().splitlines()})
    (root / "speakers.txt").write_text("".join(f"{s} {i}\n" for i, s in enumerate(speakers)))
    (root / "conf.json").write_text(json.dumps(aishell_conf()))
    return root


@contextmanager
def corpus_dir() -> Iterator[Tuple[Path, str]]:
    """A temporary directory in RAM (``/dev/shm``) when there is one, and where it is."""
    parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=parent) as d:
        yield Path(d), ("RAM (/dev/shm)" if parent else "a temporary directory")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=800)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (both)")
    ap.add_argument("--types", nargs="+", default=["raw", "shard"], choices=["raw", "shard"])
    ap.add_argument("--quick", action="store_true", help="smoke run: 60 utterances, 1 round")
    ap.add_argument("--lhotse-conf", default="{}",
                    help="JSON lhotse_conf for an extra 'ours' row (e.g. "
                         "'{\"features_on\": \"device\"}')")
    ap.add_argument("--old-tree", type=Path, default=None,
                    help="another checkout of this repository: its drop-in as an extra row "
                         "per data type and speed setting, with this tree's ratio to it")
    ap.add_argument("--no-wenet", action="store_true", help="leave WeNet's rows out")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        which, corpus, data_type, workers, speed, lconf = args.child
        child(which, Path(corpus), data_type, int(workers), bool(int(speed)),
              json.loads(lconf) or None)
        return
    if args.quick:
        args.num_utts, args.rounds = 60, 1
    from wenet_harness import sox_backend, wenet_missing

    missing = "--no-wenet" if args.no_wenet else wenet_missing()
    if missing:
        print(f"WeNet rows skipped: {missing}")
    extra = json.loads(args.lhotse_conf) or None
    with corpus_dir() as (root, where):
        corpus = make_corpus(root, args.num_utts)
        print(f"corpus: {args.num_utts} utterances (1-15 s, AISHELL-like; cv: "
              f"{max(8, args.num_utts // 25)}), in {where}; "
              f"{args.workers} DataLoader workers; {os.cpu_count()} CPUs; load average "
              f"{os.getloadavg()[0]:.1f}; {args.rounds} alternating rounds, medians")
        sox = sox_backend() if not missing else "-"
        print(f"WeNet's speed perturbation (torchaudio.sox_effects under the harness): {sox}"
              + ("" if sox.startswith("libsox") else
                 " -- for libsox itself: apt-get install libsox-dev; pip install soxbindings"))
        wenet_sp = "yes (libsox)" if sox.startswith("libsox") else "yes (stand-in)"
        rows: List[tuple] = []
        for data_type in args.types:
            for speed in (False, True):
                rows.append(("wenet", data_type, speed, None))
                rows.append(("ours", data_type, speed, None))
                if args.old_tree:
                    rows.append(("old", data_type, speed, None))
                if extra:
                    rows.append(("ours", data_type, speed, extra))
        if missing:
            rows = [r for r in rows if r[0] != "wenet"]
        results: Dict[tuple, List[Dict[str, float]]] = {}
        for r in range(args.rounds):
            if r:  # each round runs the two trees in the other order than the last
                rows = [(("old" if w == "ours" and not c else "ours" if w == "old" else w),
                         d, s, c) for w, d, s, c in rows]
            for which, data_type, speed, lconf in rows:
                key = (which, data_type, speed, json.dumps(lconf) if lconf else "")
                run = run_child(which, corpus, data_type, args.workers, speed, lconf,
                                args.old_tree)
                results.setdefault(key, []).append(run)
                print(f"round {r + 1}: {which} {data_type} speed {int(speed)}: "
                      f"{run['audio'] / run['wall']:,.0f} x real time, load average "
                      f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        print()
        print("| pipeline | data | speed perturb | x real time | first batch (s) | "
              "CPU s / audio h | of which main process | padding | PSS MiB | batches |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        med: Dict[tuple, Dict[str, float]] = {}
        for key, runs in results.items():
            m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            m["xrt"] = statistics.median(r["audio"] / r["wall"] for r in runs)
            m["cpuh"] = statistics.median(r["cpu"] / (r["audio"] / 3600) for r in runs)
            m["mainh"] = statistics.median(r["main"] / (r["audio"] / 3600) for r in runs)
            med[key] = m
            which, data_type, speed, lconf = key
            label = {"wenet": "WeNet", "old": "ours (old tree)"}.get(
                which, "ours " + lconf if lconf else "ours")
            sp = wenet_sp if speed and which == "wenet" else ("yes" if speed else "no")
            print(f"| {label} | {data_type} | {sp} | {m['xrt']:,.0f} | {m['first']:.2f} | "
                  f"{m['cpuh']:.2f} | {m['mainh']:.2f} | {100 * m['padding']:.1f}% | "
                  f"{m['pss']:,.0f} | {m['batches']:.0f} |")
        print()
        for key, m in med.items():
            which, data_type, speed, lconf = key
            old = med.get(("old", data_type, speed, ""))
            if which == "ours" and not lconf and old is not None:
                runs = zip(results[key], results[("old", data_type, speed, "")])
                per_round = [(a["audio"] / a["wall"]) / (b["audio"] / b["wall"]) for a, b in runs]
                print(f"this tree vs old tree, {data_type}, speed perturb "
                      f"{'on' if speed else 'off'}: throughput {m['xrt'] / old['xrt']:.2f}x "
                      f"(per round {', '.join(f'{r:.2f}' for r in per_round)}), first batch "
                      f"{m['first']:.2f} s vs {old['first']:.2f} s, CPU per audio hour "
                      f"{m['cpuh'] / old['cpuh']:.2f}x, batches {m['batches']:.0f} vs "
                      f"{old['batches']:.0f}")
        for key, m in med.items():
            which, data_type, speed, lconf = key
            base = med.get(("wenet", data_type, speed, ""))
            if which != "ours" or base is None:
                continue
            label = "ours " + lconf if lconf else "ours"
            print(f"{label} vs WeNet, {data_type}, speed perturb {'on' if speed else 'off'}: "
                  f"throughput {m['xrt'] / base['xrt']:.2f}x, CPU per audio hour "
                  f"{m['cpuh'] / base['cpuh']:.2f}x of WeNet's")


if __name__ == "__main__":
    main()
