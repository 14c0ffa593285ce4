"""Training WeNet's conformer on a GPU: data wait and samples/s, WeNet's loader vs ours.

The question of issue 11, item 3: does the loader keep a GPU busy with few cores per
GPU, and what does ``lhotse_conf.features_on: device`` (workers send int16 audio; dither,
fbank and spec_aug run batched on the GPU) change? Each run is a fresh process pinned to
``--cores`` CPU cores (``os.sched_setaffinity``; the DataLoader workers inherit it) that
trains WeNet's own aishell conformer (``examples/aishell/s0/conf/train_conformer.yaml``
from the snapshot at ``$WENET_ROOT``: 12 conformer blocks of 256, 6 decoder blocks; the
model classes imported from WeNet, fp32 or ``--amp``, Adam, ``accum_grad`` 4, ``grad_clip`` 5, as
WeNet's executor steps) on the corpus of ``bench/wenet_baseline.py`` (AISHELL-like
1-15 s, in RAM) with that benchmark's ``dataset_conf`` (WeNet's aishell train
augmentation: speed perturbation, fbank 80, dither 0.1, spec_aug; static batch 16) and:

* **WeNet**: ``wenet.utils.train_utils.init_dataset_and_dataloader`` (the stand-ins of
  ``wenet_harness`` for torchaudio's IO, sox's speed chain and deepspeed);
* **ours**: the drop-in ``wenet_lhotse.dropin.compat.init_dataset_and_dataloader``;
* **ours, device**: the same with ``lhotse_conf: {features_on: device}`` (the GPU).

Per step, ``wait`` is the time blocked in ``next(loader)`` (for the device path this
includes the features computed on the GPU) and ``step`` the forward, backward and
(every 4th) optimizer step, ending with ``torch.cuda.synchronize()`` -- the loss is
read each step, as WeNet's executor logs it. The first ``--warmup`` steps are not
counted. Printed per run: data-wait fraction = wait / (wait + step), utterances and
audio seconds (feature frames x 10 ms) per second, step-only utterances/s (the
model's ceiling) and the time from building the loaders to the first batch. ``--check``
also compares a few batches of the worker and device paths on the GPU (dither 0.1:
both paths take the same noise) and prints the largest feature difference and whether
the masks agree.

Run: ``python bench/gpu_train.py [--num-utts 1600] [--steps 80] [--cores 4]
[--workers 2] [--types raw shard] [--amp] [--check]``; without CUDA it runs on the CPU (a smoke
test of the script, no figure to report).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]

from wenet_baseline import corpus_dir, drop_in_args, make_corpus, preload_langid  # noqa: E402

CHILD_TIMEOUT_S = 240
PATHS = {"wenet": None, "ours": {}, "ours-device": {"features_on": "device"}}


def wenet_conformer(vocab_size: int, device: Any) -> Any:
    """WeNet's aishell conformer, built from its yaml with WeNet's own classes (as
    ``wenet.utils.init_model`` does for ``model: asr_model``; no global CMVN)."""
    import yaml

    from wenet_harness import import_wenet, wenet_root

    asr, enc, dec, ctc = import_wenet("wenet.models.transformer.asr_model",
                                      "wenet.models.transformer.encoder",
                                      "wenet.models.transformer.decoder",
                                      "wenet.models.transformer.ctc")
    conf_path = wenet_root() / "examples/aishell/s0/conf/train_conformer.yaml"
    conf = yaml.safe_load(conf_path.read_text())
    encoder = enc.ConformerEncoder(80, **conf["encoder_conf"])
    decoder = dec.TransformerDecoder(vocab_size, encoder.output_size(), **conf["decoder_conf"])
    model = asr.ASRModel(vocab_size=vocab_size, encoder=encoder, decoder=decoder,
                         ctc=ctc.CTC(vocab_size, encoder.output_size()),
                         special_tokens=conf["tokenizer_conf"]["special_tokens"],
                         **conf["model_conf"])
    return model.to(device), conf


def build_loader(which: str, corpus: Path, data_type: str, workers: int) -> Any:
    import torch

    args, conf = drop_in_args(corpus, data_type, workers)
    args.pin_memory = torch.cuda.is_available()  # WeNet's recipes pass --pin_memory
    if which == "wenet":
        from wenet_harness import import_wenet

        train_utils, char_tok = import_wenet("wenet.utils.train_utils",
                                             "wenet.text.char_tokenizer")
        tokenizer = char_tok.CharTokenizer(str(corpus / "units.txt"))
        init = train_utils.init_dataset_and_dataloader
    else:
        from wenet_lhotse.dropin.compat import init_dataset_and_dataloader as init
        from wenet_lhotse.text import CharTokenizer

        if PATHS[which]:
            conf["lhotse_conf"] = PATHS[which]
        tokenizer = CharTokenizer(corpus / "units.txt")
    _, _, loader, _ = init(args, {"dataset_conf": conf}, tokenizer, 777)
    return loader


def child(which: str, corpus: Path, data_type: str, workers: int, cores: int, steps: int,
          warmup: int, amp: bool) -> None:
    import torch

    if os.environ.get("BENCH_DUMP_AFTER"):  # where a stuck run is: stacks, then exit
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["BENCH_DUMP_AFTER"]), exit=True)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    cuda = torch.cuda.is_available()
    amp = amp and cuda
    device = torch.device("cuda" if cuda else "cpu")
    vocab = sum(1 for _ in open(corpus / "units.txt"))
    model, conf = wenet_conformer(vocab, device)
    opt = torch.optim.Adam(model.parameters(), lr=conf["optim_conf"]["lr"])
    accum, clip = conf["accum_grad"], conf["grad_clip"]
    if which != "wenet":
        preload_langid()  # a start-up cost, as WeNet's at import (bench/wenet_baseline.py)
    t_build = time.perf_counter()  # first batch: from building the loaders
    loader = build_loader(which, corpus, data_type, workers)
    it = iter(loader)
    # --amp: WeNet's torch_ddp --use_amp (fp16 autocast, GradScaler); disabled, the
    # scaler passes everything through
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    wait = step_t = audio = 0.0
    utts = done = 0
    first = None
    model.train()
    while done < warmup + steps:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:  # a short corpus: the next epoch
            it = iter(loader)
            continue
        t1 = time.perf_counter()
        if first is None:
            first = t1 - t_build
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            out = model(batch, device)
        scaler.scale(out["loss"] / accum).backward()
        if (done + 1) % accum == 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        loss = float(out["loss"])  # WeNet's executor reads the loss every step
        if cuda:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if done >= warmup:
            wait += t1 - t0
            step_t += t2 - t1
            utts += len(batch["keys"])
            audio += float(batch["feats_lengths"].sum()) / 100.0
        done += 1
    print(json.dumps({"wait": wait, "step": step_t, "utts": utts, "audio": audio,
                      "first": first, "loss": loss, "steps": steps,
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu",
                      "torch": torch.__version__}))


def check(corpus: Path, data_type: str) -> None:
    """The worker and device paths through the drop-in, first batches, on the GPU."""
    import torch

    torch.set_num_threads(1)  # as the worker path's workers: the same float rounding
    batches: Dict[str, List[Dict[str, Any]]] = {}
    for which in ("ours", "ours-device"):
        # the first 4 batches (fewer on a small corpus)
        batches[which] = list(itertools.islice(build_loader(which, corpus, data_type, 2), 4))
    diff, masks, same_keys = 0.0, True, True
    for w, d in zip(batches["ours"], batches["ours-device"]):
        same_keys &= w["keys"] == d["keys"] and torch.equal(
            w["feats_lengths"].cpu(), d["feats_lengths"].cpu())
        fw, fd = w["feats"].float(), d["feats"].float().cpu()
        diff = max(diff, float((fw - fd).abs().max()))
        masks &= bool(torch.equal(fw == 0, fd == 0))
    print(json.dumps({"max_abs_diff": diff, "masks_equal": masks, "same_keys": same_keys,
                      "device": str(batches["ours-device"][0]["feats"].device)}))


def run_child(argv: List[str]) -> Optional[Dict[str, Any]]:
    from wenet_harness import wenet_env, wenet_root

    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               WENET_ROOT=str(wenet_root()))
    if argv[1] == "wenet":  # as bench/wenet_baseline.py: the stand-ins on WeNet's path
        env = wenet_env(env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    try:
        out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                             env=env, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"TIMED OUT after {CHILD_TIMEOUT_S} s: {' '.join(argv)}", flush=True)
        return None
    if out.returncode != 0:
        print(f"FAILED {' '.join(argv)}:\n{out.stderr[-2500:]}", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=1600)
    ap.add_argument("--steps", type=int, default=80, help="steps measured per run")
    ap.add_argument("--warmup", type=int, default=8, help="steps not counted")
    ap.add_argument("--cores", type=int, default=4, help="CPU cores per run")
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--types", nargs="+", default=["raw", "shard"], choices=["raw", "shard"])
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    ap.add_argument("--amp", action="store_true",
                    help="fp16 autocast + GradScaler (WeNet's --use_amp)")
    ap.add_argument("--check", action="store_true", help="worker vs device path features")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child[0] == "check":
            check(Path(args.child[1]), args.child[2])
        else:
            which, corpus, data_type, workers, cores, steps, warmup, amp = args.child
            child(which, Path(corpus), data_type, int(workers), int(cores), int(steps),
                  int(warmup), bool(int(amp)))
        return
    with corpus_dir() as (root, where):
        corpus = make_corpus(root, args.num_utts)
        print(f"corpus: {args.num_utts} utterances (1-15 s), in {where}; {args.cores} of "
              f"{os.cpu_count()} CPU cores per run; {args.steps} steps measured after "
              f"{args.warmup}; WeNet's aishell conformer, "
              f"{'fp16 autocast (--use_amp)' if args.amp else 'fp32'}, static batch 16", flush=True)
        if args.check:
            for data_type in args.types:
                res = run_child(["--child", "check", str(corpus), data_type])
                print(f"check {data_type}: {json.dumps(res)}", flush=True)
        print("| loader | data | workers | data wait | utt/s | audio s/s | step-only utt/s "
              "| first batch (s) | GPU |")
        print("|---|---|---|---|---|---|---|---|---|")
        for data_type in args.types:
            for workers in args.workers:
                for which in args.paths:
                    r = run_child(["--child", which, str(corpus), data_type, str(workers),
                                   str(args.cores), str(args.steps), str(args.warmup),
                                   str(int(args.amp))])
                    if r is None:
                        continue
                    total = r["wait"] + r["step"]
                    print(f"| {which} | {data_type} | {workers} | "
                          f"{100 * r['wait'] / total:.0f}% | {r['utts'] / total:.1f} | "
                          f"{r['audio'] / total:,.0f} | {r['utts'] / r['step']:.1f} | "
                          f"{r['first']:.2f} | {r['gpu']} |", flush=True)


if __name__ == "__main__":
    main()
