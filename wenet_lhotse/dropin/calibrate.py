"""Batch sizes fitted to the accelerator: for each 2D bucket, the largest batch of the
user's WeNet model that trains one step within a memory budget.

NeMo's OOMptimizer (``scripts/speech_recognition/oomptimizer.py``) tunes
``bucket_batch_sizes`` this way; this is the same search on WeNet's model, built by WeNet's
own ``init_model`` from the user's yaml, with WeNet's optimizer
(``init_optimizer_and_scheduler``):

* each bucket ``(max seconds, max tokens)`` becomes the batch WeNet's executor would
  train at that bucket's edge: ``feats`` of the frames the yaml's features give for the
  bucket's duration at the slowest ``speed_perturb`` factor, ``target`` of the bucket's
  token count (ids drawn from the vocabulary, never blank or ``<sos/eos>``);
* a step is forward (``model(batch, device)["loss"]``), backward and
  ``optimizer.step()``, as WeNet's executor runs it (fp16/bf16 autocast with ``--dtype``);
* :func:`largest_batch` doubles the batch until a step does not fit, then bisects until
  the gap between fitting and not fitting is at most ``rel_tol`` (5%) of the fitting size;
* buckets are searched from the largest (most memory per utterance) to the smallest: a
  bucket no larger in either dimension than one already searched starts from that result.

What "fits" means is a :class:`StepMemory`:

* :class:`CudaMemory`: the allocator's peak (``torch.cuda.max_memory_allocated``) within
  ``fraction`` of the card's memory; an out-of-memory error does not fit (the real
  measure, on the card that will train);
* :class:`SavedTensorMemory`: measured on any device without an allocator's statistics
  (the CPU): bytes of the parameters, their gradients and the optimizer's state, plus the
  peak of the tensors autograd saved for the backward pass (counted by
  ``torch.autograd.graph.saved_tensors_hooks``), within a budget in bytes. It is exact
  about what autograd keeps, blind to transient buffers: use it to dry-run the
  configuration, not to set a GPU's batch sizes.

The result is a ``dataset_conf.lhotse_conf`` yaml snippet with ``bucket_bins_2d`` and
``bucket_batch_sizes_2d`` (:func:`snippet`).
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import random
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

Bucket = Tuple[float, int]


def largest_batch(fits: Callable[[int], bool], start: int = 1, rel_tol: float = 0.05,
                  limit: int = 1 << 16) -> Tuple[int, int]:
    """The largest batch size ``n <= limit`` with ``fits(n)``, assuming ``fits`` is
    monotone (true up to some size, false above). Doubles from ``start`` until a size does
    not fit, then bisects until ``hi - lo <= max(1, rel_tol * lo)``. Returns
    ``(size, trials)``; size 0 when not even 1 fits.

    >>> largest_batch(lambda n: n <= 37)[0]
    37
    >>> n, _ = largest_batch(lambda n: n <= 1000, start=8)
    >>> 1000 / 1.05 <= n <= 1000
    True
    >>> largest_batch(lambda n: False)
    (0, 1)
    """
    if rel_tol < 0 or start < 1 or limit < 1:
        raise ValueError("largest_batch: rel_tol >= 0, start >= 1 and limit >= 1")
    trials = 0
    lo, hi = 0, None  # lo fits (0: none known), hi does not fit
    n = min(start, limit)
    while True:
        trials += 1
        if fits(n):
            lo = n
            if n >= limit:
                return lo, trials
            n = min(2 * n, limit)
        else:
            hi = n
            break
    if lo == 0 and hi > 1:  # start itself did not fit: search below it
        lo_try = 1
        trials += 1
        if not fits(lo_try):
            return 0, trials
        lo = lo_try
    elif lo == 0:
        return 0, trials
    while hi - lo > max(1, int(rel_tol * lo)):
        mid = (lo + hi) // 2
        trials += 1
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, trials


class StepMemory:
    """Says whether one training step fits: :meth:`measure` runs ``step`` and returns
    its peak in bytes, or ``None`` for an out-of-memory; :meth:`fits` compares with the
    budget."""

    budget: int

    def measure(self, step: Callable[[], None]) -> Optional[int]:  # pragma: no cover
        raise NotImplementedError

    def fits(self, step: Callable[[], None]) -> Tuple[bool, Optional[int]]:
        peak = self.measure(step)
        return peak is not None and peak <= self.budget, peak


@dataclass
class CudaMemory(StepMemory):
    """The CUDA allocator's peak during a step, within ``fraction`` of the card's memory
    (``torch.cuda.mem_get_info``'s total)."""

    device: Any = None
    fraction: float = 0.9
    budget: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        import torch

        self.device = torch.device(self.device or "cuda")
        _, total = torch.cuda.mem_get_info(self.device)
        self.budget = int(self.fraction * total)

    def measure(self, step: Callable[[], None]) -> Optional[int]:
        import torch

        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            step()
            torch.cuda.synchronize(self.device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None
        return int(torch.cuda.max_memory_allocated(self.device))


@dataclass
class SavedTensorMemory(StepMemory):
    """Parameters, gradients and optimizer state plus the peak bytes autograd saves for
    the backward pass (unique storages), within ``budget`` bytes (see the module
    docstring)."""

    budget: int
    model: Any = None
    optimizer: Any = None

    def measure(self, step: Callable[[], None]) -> Optional[int]:
        import torch

        saved: Dict[int, int] = {}

        def pack(t: Any) -> Any:
            try:
                st = t.untyped_storage()
                saved.setdefault(st.data_ptr(), st.nbytes())
            except (RuntimeError, NotImplementedError):  # e.g. sparse or meta tensors
                saved.setdefault(id(t), t.element_size() * t.nelement())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step()
        return self.state_bytes() + sum(saved.values())

    def state_bytes(self) -> int:
        """Parameters, their gradients and the optimizer's state tensors, in bytes."""
        import torch

        n = 0
        if self.model is not None:
            for p in self.model.parameters():
                n += p.element_size() * p.nelement() * (2 if p.requires_grad else 1)
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                n += sum(v.element_size() * v.nelement() for v in state.values()
                         if isinstance(v, torch.Tensor))
        return n


@dataclass
class WenetStep:
    """One training step of WeNet's model on a synthetic batch at a bucket's edge."""

    model: Any
    optimizer: Any
    device: Any
    input_dim: int
    vocab_size: int
    frames: Callable[[float], int]
    dtype: str = "fp32"
    seed: int = 0

    def batch(self, n: int, bucket: Bucket) -> Dict[str, Any]:
        """``n`` utterances of the bucket's edge (frames of its duration, its tokens)."""
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        frames = self.frames(bucket[0])
        tokens = max(1, int(bucket[1]))
        # ids 1 .. vocab-2: never blank (0) nor <sos/eos> (WeNet's last id by default)
        high = max(2, self.vocab_size - 1)
        # WeNet's batch dict (``padding()``), without the waveform (no model of the
        # pinned snapshot's asr_model family reads ``pcm`` in its loss)
        return {"keys": [f"calibrate-{i}" for i in range(n)],
                "feats": torch.randn(n, frames, self.input_dim, generator=gen),
                "feats_lengths": torch.full((n,), frames, dtype=torch.int32),
                "target": torch.randint(1, high, (n, tokens), generator=gen),
                "target_lengths": torch.full((n,), tokens, dtype=torch.int32),
                "langs": ["zh"] * n, "tasks": ["transcribe"] * n}

    def run(self, n: int, bucket: Bucket) -> None:
        import torch

        batch = self.batch(n, bucket)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.dtype)
        device = torch.device(self.device)
        with torch.autocast(device.type, dtype=dtype or torch.float32,
                            enabled=dtype is not None):
            loss = self.model(batch, device)["loss"]
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


@dataclass
class BucketResult:
    bucket: Bucket
    batch_size: int
    peak_bytes: Optional[int]
    trials: int


def calibrate(step: WenetStep, memory: StepMemory, buckets: Sequence[Bucket],
              rel_tol: float = 0.05, limit: int = 4096,
              progress: Optional[Callable[[BucketResult], None]] = None
              ) -> List[BucketResult]:
    """The largest fitting batch for each bucket (in the order given); see the module
    docstring for the order of the search and the starting points."""
    order = sorted(range(len(buckets)), key=lambda i: (-buckets[i][0], -buckets[i][1]))
    results: Dict[int, BucketResult] = {}
    for i in order:
        bucket = buckets[i]
        # a bucket no larger in both dimensions than one searched fits at least as many
        start = max([r.batch_size for r in results.values()
                     if r.bucket[0] >= bucket[0] and r.bucket[1] >= bucket[1]] + [1])
        peaks: Dict[int, Optional[int]] = {}

        def fits(n: int, bucket: Bucket = bucket, peaks: Dict[int, Optional[int]] = peaks
                 ) -> bool:
            ok, peak = memory.fits(lambda: step.run(n, bucket))
            peaks[n] = peak
            logger.debug("bucket %s batch %d: peak %s bytes, %s", bucket, n, peak,
                         "fits" if ok else "does not fit")
            return ok

        size, trials = largest_batch(fits, start=start, rel_tol=rel_tol, limit=limit)
        results[i] = BucketResult(bucket, size, peaks.get(size), trials)
        if progress is not None:
            progress(results[i])
    return [results[i] for i in range(len(buckets))]


def snippet(results: Sequence[BucketResult], header: str = "") -> str:
    """The ``dataset_conf.lhotse_conf`` yaml snippet for the calibrated buckets."""
    bins = ", ".join(f"[{_num(r.bucket[0])}, {int(r.bucket[1])}]" for r in results)
    sizes = ", ".join(str(r.batch_size) for r in results)
    lines = [f"# {line}" for line in header.splitlines()]
    lines += ["dataset_conf:", "  lhotse_conf:", f"    bucket_bins_2d: [{bins}]",
              f"    bucket_batch_sizes_2d: [{sizes}]", ""]
    return "\n".join(lines)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def bins_from(configs: Mapping[str, Any], bins: Optional[Sequence[Any]],
              source: Optional[str] = None) -> List[Bucket]:
    """Buckets from ``bins`` (estimate-bins' ``bucket_bins_2d``) else the yaml's
    ``dataset_conf.lhotse_conf.bucket_bins_2d``; a one-line error when neither has any."""
    from wenet_lhotse.errors import WenetConfigError

    if bins is None:
        lconf = (configs.get("dataset_conf") or {}).get("lhotse_conf") or {}
        bins = lconf.get("bucket_bins_2d")
    if not bins:
        raise WenetConfigError(
            "dataset_conf.lhotse_conf.bucket_bins_2d", "no 2D buckets to calibrate (run "
            "'wenet-lhotse estimate-bins' and pass its output with --bins, or set the key)",
            source)
    out: List[Bucket] = []
    for i, b in enumerate(bins):
        if not (isinstance(b, (list, tuple)) and len(b) == 2 and float(b[0]) > 0
                and int(b[1]) >= 1):
            raise WenetConfigError(f"bucket_bins_2d[{i}]", "expected [max seconds > 0, "
                                   f"max tokens >= 1], got {b!r}", source)
        out.append((float(b[0]), int(b[1])))
    return out


def frames_for(dataset_conf: Mapping[str, Any]) -> Callable[[float], int]:
    """``seconds -> feature frames`` as the yaml's features frame them, at the slowest
    ``speed_perturb`` factor (the longest an utterance of that duration becomes)."""
    from wenet_lhotse.features.recipe import FeatureRecipe

    recipe = FeatureRecipe.from_wenet_conf(dataset_conf)
    counter = recipe.frame_counter()
    slowest = min(recipe.speeds) if recipe.speeds else 1.0
    rate = int(recipe.resample_to or 16000)

    def frames(seconds: float) -> int:
        return int(counter.planned(int(math.ceil(seconds * rate)), rate, slowest)[2])

    return frames


def build_wenet_step(configs: Dict[str, Any], device: str = "cpu", dtype: str = "fp32",
                     seed: int = 0) -> WenetStep:
    """WeNet's model and optimizer for ``configs`` (a training yaml, as loaded), built by
    WeNet's own ``init_tokenizer``, ``check_modify_and_save_config``, ``init_model`` and
    ``init_optimizer_and_scheduler``, on ``device``."""
    import torch

    from wenet_lhotse.dropin.launch import import_wenet_module

    torch.manual_seed(seed)
    random.seed(seed)
    configs = copy.deepcopy(configs)
    init_tokenizer = import_wenet_module("wenet.utils.init_tokenizer").init_tokenizer
    train_utils = import_wenet_module("wenet.utils.train_utils")
    init_model = import_wenet_module("wenet.utils.init_model").init_model
    tokenizer = init_tokenizer(configs)
    configs["vocab_size"] = tokenizer.vocab_size()  # as init_dataset_and_dataloader sets it
    with tempfile.TemporaryDirectory() as tmp:
        args = argparse.Namespace(train_engine="torch_ddp", use_amp=dtype == "fp16",
                                  dtype=dtype, model_dir=tmp, save_states="model_only",
                                  use_lora=False, deepspeed_config=None)
        # WeNet writes model_dir/train.yaml on rank 0: into the temporary directory
        configs = train_utils.check_modify_and_save_config(args, configs,
                                                           tokenizer.symbol_table)
        model, configs = init_model(args, configs)
    model = model.to(device)
    _, optimizer, _ = train_utils.init_optimizer_and_scheduler(args, configs, model)
    return WenetStep(model, optimizer, device, int(configs["input_dim"]),
                     int(configs["output_dim"]), frames_for(configs["dataset_conf"]),
                     dtype=dtype, seed=seed)
