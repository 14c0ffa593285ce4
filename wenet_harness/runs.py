"""Run WeNet's own ``train.py`` / ``recognize.py`` in subprocesses, tiny and on CPU.

Three ways to put a loader under WeNet's ``train.py`` (``how``):

* ``"wenet"``  -- WeNet's own loader (``python -m wenet.bin.train``), the reference;
* ``"module"`` -- ``python -m wenet_lhotse.dropin.train`` (patches WeNet before import);
* ``"swap"``   -- a copy of WeNet's ``train.py`` with the documented one-import change
  (``from wenet_lhotse.dropin.compat import init_dataset_and_dataloader`` after WeNet's
  own import block), run as a script.

``nproc=1`` runs one process with the ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables
WeNet's ``init_process_group(env://)`` needs; ``nproc>1`` runs ``torchrun --standalone``.
Always ``--device cpu --ddp.dist_backend gloo --num_workers 1``.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import yaml

from wenet_harness import wenet_env, wenet_root

#: WeNet's import of the loader factory in bin/train.py, followed by the swap line
SWAP_LINE = "from wenet_lhotse.dropin.compat import init_dataset_and_dataloader  # noqa: F811\n"

#: a conformer/transformer small enough to train 2 epochs of ~100 short utterances on
#: one CPU core in seconds
TINY_MODEL: Dict[str, Any] = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64,
                     "num_blocks": 1, "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                     "attention_dropout_rate": 0.0, "input_layer": "conv2d",
                     "normalize_before": True, "cnn_module_kernel": 7,
                     "use_cnn_module": True, "activation_type": "swish",
                     "pos_enc_layer_type": "rel_pos",
                     "selfattention_layer_type": "rel_selfattn"},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                     "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                     "self_attention_dropout_rate": 0.0, "src_attention_dropout_rate": 0.0},
    "ctc": "ctc", "ctc_conf": {"ctc_blank_id": 0},
    "cmvn": None, "cmvn_conf": {},
    "model": "asr_model",
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False},
    "dataset": "asr",
    "grad_clip": 5, "accum_grad": 1, "max_epoch": 2, "log_interval": 100,
    "optim": "adam", "optim_conf": {"lr": 0.002},
    "scheduler": "warmuplr", "scheduler_conf": {"warmup_steps": 100},
}

#: WeNet's aishell dataset_conf, shrunk (20 mel bins, static batches of 8)
TINY_DATASET_CONF: Dict[str, Any] = {
    "filter_conf": {"max_length": 40960, "min_length": 0, "token_max_length": 200,
                    "token_min_length": 1},
    "resample_conf": {"resample_rate": 16000},
    "speed_perturb": False,
    "fbank_conf": {"num_mel_bins": 20, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
    "spec_aug": True,
    "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10},
    "shuffle": True, "shuffle_conf": {"shuffle_size": 1500},
    "sort": True, "sort_conf": {"sort_size": 500},
    "batch_conf": {"batch_type": "static", "batch_size": 8},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def units_special_tokens(units: Path) -> Dict[str, int]:
    """WeNet's ``tokenizer_conf.special_tokens`` for a units file (wherever its
    ``<sos/eos>`` is)."""
    table = dict(line.split() for line in units.read_text(encoding="utf-8").splitlines())
    sos = int(table["<sos/eos>"])
    return {"<blank>": int(table["<blank>"]), "<unk>": int(table["<unk>"]),
            "<sos>": sos, "<eos>": sos}


def speaker_table(data_list: Path, out: Path) -> Path:
    """``speaker id`` lines for the speakers of a raw list (WeNet's ``padding()`` needs
    ``speaker_conf`` when lines carry ``speaker``)."""
    import json

    spk = sorted({json.loads(line)["speaker"] for line in
                  data_list.read_text(encoding="utf-8").splitlines()})
    out.write_text("".join(f"{s} {i}\n" for i, s in enumerate(spk)), encoding="utf-8")
    return out


def write_config(path: Path, units: Path, speakers: Optional[Path] = None,
                 dataset_conf: Optional[Mapping[str, Any]] = None, **top: Any) -> Path:
    """A WeNet training yaml: :data:`TINY_MODEL`, ``dataset_conf`` over
    :data:`TINY_DATASET_CONF`, char tokenizer on ``units``, ``top`` keys over all."""
    conf: Dict[str, Any] = yaml.safe_load(yaml.safe_dump(TINY_MODEL))
    dconf = yaml.safe_load(yaml.safe_dump(TINY_DATASET_CONF))
    dconf.update(dataset_conf or {})
    if speakers is not None:
        dconf["speaker_conf"] = {"speaker_table_path": str(speakers)}
    conf["dataset_conf"] = dconf
    conf["tokenizer"] = "char"
    conf["tokenizer_conf"] = {"symbol_table_path": str(units), "split_with_space": False,
                              "bpe_path": None, "non_lang_syms_path": None,
                              "is_multilingual": False, "num_languages": 1,
                              "special_tokens": units_special_tokens(units)}
    conf.update(top)
    path.write_text(yaml.safe_dump(conf), encoding="utf-8")
    return path


def swapped_train_py(out_dir: Path) -> Path:
    """WeNet's ``bin/train.py`` with the one-import change, written to ``out_dir``."""
    src = (wenet_root() / "wenet" / "bin" / "train.py").read_text(encoding="utf-8")
    block = re.search(r"from wenet\.utils\.train_utils import \([^)]*\)\n", src)
    assert block and "init_dataset_and_dataloader" in block.group(0), \
        "WeNet's train.py no longer imports init_dataset_and_dataloader from train_utils"
    out = out_dir / "train_swapped.py"
    out.write_text(src[:block.end()] + SWAP_LINE + src[block.end():], encoding="utf-8")
    return out


def run_train(how: str, config: Path, train_data: Sequence[Path], cv_data: Path,
              model_dir: Path, *, data_type: str = "raw", nproc: int = 1,
              extra: Sequence[str] = (), timeout: int = 600,
              record_keys: Optional[Path] = None) -> subprocess.CompletedProcess:
    """WeNet's train.py with the loader picked by ``how`` (see the module docstring).
    Returns the finished process (stdout and stderr together in ``.stdout``).
    ``record_keys``: a directory where :mod:`wenet_harness.record_keys` writes the keys
    of every batch WeNet's executor trains (``how`` "wenet" or "module")."""
    model_dir.mkdir(parents=True, exist_ok=True)
    if how == "wenet":
        target = ["-m", "wenet.bin.train"]
    elif how == "module":
        target = ["-m", "wenet_lhotse.dropin.train"]
    elif how == "swap":
        target = [str(swapped_train_py(model_dir))]
    else:
        raise ValueError(how)
    if record_keys is not None:
        target = ["-m", "wenet_harness.record_keys", str(record_keys), target[1]]
    args = ["--config", str(config), "--data_type", data_type,
            "--train_data", *map(str, train_data), "--cv_data", str(cv_data),
            "--model_dir", str(model_dir), "--tensorboard_dir", str(model_dir / "tb"),
            "--device", "cpu", "--ddp.dist_backend", "gloo", "--num_workers", "1",
            "--prefetch", "2", *extra]
    port = str(free_port())
    if nproc == 1:
        cmd = [sys.executable, *target, *args]
        env = wenet_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                    f"--nproc_per_node={nproc}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{port}"]
        cmd = [*launcher, *target, *args]
        env = wenet_env()
    return subprocess.run(cmd, env=env, cwd=model_dir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def saved_steps(model_dir: Path) -> Dict[str, int]:
    """``{tag: step}`` from the yaml WeNet's ``save_model`` writes next to each checkpoint
    (``epoch_0``, ``step_99``, ...): the optimizer steps taken by then."""
    out: Dict[str, int] = {}
    for p in sorted(model_dir.glob("*.yaml")):
        if p.stem in ("train", "init"):
            continue
        info = yaml.safe_load(p.read_text(encoding="utf-8"))
        out[p.stem] = int(info["step"])
    return out



def run_recognize(how: str, config: Path, test_data: Path, checkpoint: Path, result_dir: Path,
                  *, data_type: str = "raw", batch_size: int = 4,
                  modes: Sequence[str] = ("ctc_greedy_search", "attention"),
                  num_workers: int = 0, timeout: int = 600) -> subprocess.CompletedProcess:
    """WeNet's ``recognize.py`` with WeNet's own reading (``how="wenet"``) or ours
    (``how="module"``: ``python -m wenet_lhotse.dropin.recognize``)."""
    target = {"wenet": ["-m", "wenet.bin.recognize"],
              "module": ["-m", "wenet_lhotse.dropin.recognize"]}[how]
    result_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, *target, "--config", str(config), "--data_type", data_type,
           "--test_data", str(test_data), "--checkpoint", str(checkpoint),
           "--result_dir", str(result_dir), "--device", "cpu", "--batch_size", str(batch_size),
           "--num_workers", str(num_workers), "--modes", *modes]
    return subprocess.run(cmd, env=wenet_env(), cwd=result_dir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def read_results(result_dir: Path, mode: str) -> Dict[str, str]:
    """``{key: hypothesis}`` from recognize.py's ``<result_dir>/<mode>/text``."""
    out: Dict[str, str] = {}
    for line in (result_dir / mode / "text").read_text(encoding="utf-8").splitlines():
        key, _, hyp = line.partition(" ")
        out[key] = hyp
    return out
