"""Nested weighted groups of sources, with NeMo's temperature re-weighting.

``lhotse_conf.sources`` may hold groups: ``{group: [...], weight: w, tags: {...}}``, nested
to any depth. :func:`flatten_sources` turns them into the flat list of sources the loader
mixes, each with its effective weight: the product, along its path, of the weights
normalized within each level after re-weighting by temperature. Group tags are inherited
(a source's own tags win).

Temperature (``lhotse_conf.reweight_temperature``): a number for every level or a list,
one per nesting level (top first), as NeMo's ``reweight_temperature``. Within each level
the weights become ``w_i ** T / sum_j w_j ** T`` -- NeMo's ``temperature_reweighting``
(nemo/collections/common/data/lhotse/cutset.py: "Formula: normalized_weight_i =
(w_i ^ temperature) / sum(w_j ^ temperature)"): ``T = 1`` keeps the ratios, ``T = 0``
gives every entry of the level the same weight, ``T < 1`` favours small sources when
the weights are sizes (hours or utterances), ``T > 1`` the large ones. NeMo skips
re-weighting altogether for a scalar ``0``; here ``0`` means ``0`` at every level.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

Temperature = Union[None, float, Sequence[float]]


def temperature_reweighting(weights: Sequence[float], temperature: float = 1.0) -> List[float]:
    """``w_i ** T / sum_j w_j ** T`` (NeMo's formula); weights must be > 0."""
    if any(not w > 0 for w in weights):
        raise ValueError(f"source weights must be positive for re-weighting, got {list(weights)}")
    scaled = [float(w) ** float(temperature) for w in weights]
    total = sum(scaled)
    return [s / total for s in scaled]


def _depth(entries: Sequence[Any]) -> int:
    inner = [_depth(e["group"]) for e in entries if isinstance(e, Mapping) and "group" in e]
    return 1 + max(inner, default=0)


def _level_temperatures(temperature: Temperature, depth: int) -> List[float]:
    if temperature is None:
        return [1.0] * depth
    if isinstance(temperature, (int, float)):
        return [float(temperature)] * depth
    temps = [float(t) for t in temperature]
    if len(temps) != depth:
        raise ValueError(f"lhotse_conf.reweight_temperature has {len(temps)} values; the "
                         f"sources nest {depth} level(s) deep: give one per level or a number")
    return temps


def has_groups(sources: Any) -> bool:
    return isinstance(sources, (list, tuple)) and any(
        isinstance(s, Mapping) and "group" in s for s in sources)


def flatten_sources(sources: Any, temperature: Temperature = None) -> Any:
    """Flat sources with effective weights (see the module docstring). Sources without
    groups and without temperature are returned unchanged."""
    if not isinstance(sources, (list, tuple)) or (temperature is None and not has_groups(sources)):
        return sources
    temps = _level_temperatures(temperature, _depth(sources))
    out: List[Any] = []
    _flatten(list(sources), 1.0, {}, temps, 0, out)
    return out


def _weight(entry: Any) -> float:
    w = entry.get("weight", 1.0) if isinstance(entry, Mapping) else getattr(entry, "weight", 1.0)
    return float(w)


def _flatten(entries: List[Any], scale: float, tags: Dict[str, Any], temps: List[float],
             level: int, out: List[Any]) -> None:
    if not entries:
        raise ValueError("an empty source group")
    weights = temperature_reweighting([_weight(e) for e in entries], temps[level])
    for entry, w in zip(entries, weights):
        if isinstance(entry, Mapping) and "group" in entry:
            unknown = set(entry) - {"group", "weight", "tags", "name"}
            if unknown:
                raise ValueError(f"source group {entry.get('name', '')!r}: unknown keys "
                                 f"{sorted(unknown)}")
            _flatten(list(entry["group"]), scale * w, {**tags, **(entry.get("tags") or {})},
                     temps, level + 1, out)
            continue
        if isinstance(entry, Mapping):
            spec: Any = {**entry, "weight": scale * w}
            if tags:
                spec["tags"] = {**tags, **(entry.get("tags") or {})}
        elif hasattr(entry, "weight"):  # a SourceSpec
            import dataclasses

            spec = dataclasses.replace(entry, weight=scale * w,
                                       tags={**tags, **entry.tags})
        else:  # a bare path
            spec = {"path": str(entry), "weight": scale * w, **({"tags": tags} if tags else {})}
        out.append(spec)


def effective_weights(sources: Any, temperature: Optional[Temperature] = None) -> List[float]:
    """The flat sources' weights (for tests and logs)."""
    return [_weight(s) for s in flatten_sources(list(sources), temperature if temperature
                                                is not None else 1.0)]
