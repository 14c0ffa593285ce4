"""The drop-in: WeNet's own scripts and entry points, served by wenet-lhotse's loader.

Everything WeNet-facing lives here, above the loader; nothing below imports it.

* :func:`init_dataset_and_dataloader` (:mod:`.compat`): WeNet's
  ``wenet.utils.train_utils.init_dataset_and_dataloader`` -- same signature, return value
  and side effects, WeNet's semantics by default (``lhotse_conf`` keys opt in to ours:
  :data:`WENET_LHOTSE_DEFAULTS`); :func:`Dataset` stands in for ``wenet.dataset.Dataset``.
* ``python -m wenet_lhotse.dropin.train`` (:mod:`.train`): WeNet's own ``train.py`` with
  that one import replaced, the loader's position saved beside WeNet's checkpoints and
  restored by ``--checkpoint`` (:mod:`.resume`).
* ``python -m wenet_lhotse.dropin.recognize`` (:mod:`.recognize`): WeNet's own
  ``recognize.py`` reading through :func:`Dataset`.
* :mod:`.calibrate` (``wenet-lhotse calibrate``): per-bucket batch sizes fitted to the
  accelerator by training steps of the yaml's WeNet model.
* :mod:`.plot` (``wenet-lhotse plot EXP_DIR``): a WeNet run's tensorboard logs and
  ``train.log`` drawn to a PNG.
* :mod:`.launch` runs a WeNet script as ``__main__`` after patching it, with one-line
  errors; :mod:`.shims` stands in for what WeNet imports but never calls here
  (torchaudio, deepspeed), only while WeNet imports.

Names are imported on first use (PEP 562): ``python -m wenet_lhotse.dropin.train`` sets up
the stand-ins before anything heavy is imported.
"""

from __future__ import annotations

from wenet_lhotse import lazy_exports

# public name -> module of this package that defines it
_EXPORTS = {
    "init_dataset_and_dataloader": "wenet_lhotse.dropin.compat",
    "Dataset": "wenet_lhotse.dropin.compat",
    "WENET_LHOTSE_DEFAULTS": "wenet_lhotse.dropin.compat",
    "WENET_DATA_TYPES": "wenet_lhotse.dropin.compat",
    "wenet_sources": "wenet_lhotse.dropin.compat",
    "wenet_equal_steps": "wenet_lhotse.dropin.compat",
    "run_patched": "wenet_lhotse.dropin.launch",
    "MissingDependency": "wenet_lhotse.dropin.shims",
    "loader_state_path": "wenet_lhotse.dropin.resume",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
