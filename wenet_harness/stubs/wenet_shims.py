"""torch 2.13 shim for WeNet's ``wenet/models/squeezeformer/conv2d.py``.

That file does ``from torch.nn.modules.conv import ... Union, Tensor, Optional``;
torch 2.13 no longer re-exports these names there, so ``import wenet`` (which imports
every model) fails. Restore the three names; nothing else changes.
"""

import typing

import torch
import torch.nn.modules.conv as _conv

for _name, _value in (("Union", typing.Union), ("Optional", typing.Optional),
                      ("Tensor", torch.Tensor)):
    if not hasattr(_conv, _name):
        setattr(_conv, _name, _value)


# -- langid's model, decoded once per machine (test speed, not behaviour) --
#
# WeNet's ``wenet/dataset/processor.py`` builds ``LanguageIdentifier.from_modelstring(model)``
# at import: base64 + bz2 + unpickling of langid's embedded model, 2.5-4 s of CPU in every
# process that imports WeNet (each rank, each recognize.py) -- the largest single cost of
# a tiny train.py run here. The decoded model is kept as plain arrays and JSON
# (``np.load(allow_pickle=False)``: a planted cache file runs nothing), keyed by a hash of
# langid's model string, and the identifier is built from them with langid's own
# constructor: the same arrays (same typecodes), classes and automaton.
# tests/test_wenet_harness.py checks the cached identifier against langid's own.

def _langid_cache_dir():
    import os
    import tempfile

    return os.environ.get("WENET_HARNESS_CACHE") or os.path.join(
        tempfile.gettempdir(), f"wenet-harness-cache-{os.getuid()}")


def _langid_cached(cls, string, *args, **kwargs):
    import array
    import hashlib
    import json
    import os

    import numpy as np

    key = hashlib.sha256(string if isinstance(string, bytes) else string.encode()).hexdigest()
    base = os.path.join(_langid_cache_dir(), f"langid-{key[:24]}")
    try:
        with np.load(base + ".npz", allow_pickle=False) as z:
            ptc, pc, nextmove = z["nb_ptc"], z["nb_pc"], z["tk_nextmove"]
            typecode = str(z["nextmove_typecode"])
        with open(base + ".json", encoding="utf-8") as f:
            meta = json.load(f)
        classes = meta["nb_classes"]
        output = {int(k): tuple(v) for k, v in meta["tk_output"].items()}
        return cls(ptc, pc, ptc.shape[0], classes, array.array(typecode, nextmove.tobytes()),
                   output, *args, **kwargs)
    except (OSError, KeyError, ValueError):
        pass
    ident = _langid_original.__func__(cls, string, *args, **kwargs)
    try:
        os.makedirs(os.path.dirname(base), exist_ok=True)
        tmp = f"{base}.{os.getpid()}.tmp"
        with open(tmp + ".json", "w", encoding="utf-8") as f:
            json.dump({"nb_classes": list(ident.nb_classes),
                       "tk_output": {str(k): list(v) for k, v in ident.tk_output.items()}}, f)
        with open(tmp + ".npz", "wb") as f:
            np.savez(f, nb_ptc=ident.nb_ptc, nb_pc=ident.nb_pc,
                     tk_nextmove=np.frombuffer(ident.tk_nextmove.tobytes(),
                                               dtype=ident.tk_nextmove.typecode),
                     nextmove_typecode=np.array(ident.tk_nextmove.typecode))
        # the json first: a reader that sees the .npz finds its .json
        os.replace(tmp + ".json", base + ".json")
        os.replace(tmp + ".npz", base + ".npz")
    except OSError:
        pass
    return ident


try:
    from langid.langid import LanguageIdentifier as _LanguageIdentifier
except ImportError:  # no langid: WeNet's import names it (wenet_missing)
    pass
else:
    _langid_original = _LanguageIdentifier.__dict__["from_modelstring"]
    _LanguageIdentifier.from_modelstring = classmethod(_langid_cached)
