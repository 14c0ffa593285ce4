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
