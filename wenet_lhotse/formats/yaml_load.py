"""yaml read with a bound on what aliases expand to.

``yaml.safe_load`` builds nothing dangerous, but its aliases are references: a
651-byte document of nested anchors (an "alias bomb") expands to 10^9 nodes when it
is walked, printed or copied (``bench``/``cmvn -c`` ran past 60 s at 3-5.7 GB). The
:class:`BoundedSafeLoader` is PyYAML's ``SafeLoader`` that counts the nodes the
document would have with every alias expanded (linear time: sizes memoised per node)
and refuses one over :data:`MAX_YAML_NODES`, or nested past the interpreter's
recursion limit, with a ``yaml.YAMLError`` that names the line. Configs with a few
anchors (a shared ``fbank_conf``) load as before. WeNet uses ``yaml.load`` with
``FullLoader``, which has no bound.
"""

from __future__ import annotations

from typing import IO, Any, Dict, Union

import yaml

#: Most nodes a yaml document may expand to (a WeNet config has a few hundred).
MAX_YAML_NODES = 100_000


class YamlTooLarge(yaml.MarkedYAMLError):
    """A document whose aliases expand past :data:`MAX_YAML_NODES` nodes."""


def _expanded(node: yaml.Node, memo: Dict[int, int]) -> int:
    """Nodes under ``node`` (itself included) with aliases expanded; iterative (a deep
    document would exhaust the recursion limit) and memoised per node; a node inside
    itself (a recursive anchor) counts once."""
    open_: set = set()
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in memo:
            continue
        if isinstance(n, yaml.ScalarNode):
            memo[id(n)] = 1
            continue
        children = ([c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode)
                    else list(n.value))
        if done:
            open_.discard(id(n))
            memo[id(n)] = 1 + sum(memo.get(id(c), 1) for c in children)
            if memo[id(n)] > MAX_YAML_NODES:
                raise YamlTooLarge(None, None, f"aliases expand to over {MAX_YAML_NODES} "
                                   "nodes (an alias bomb?)", n.start_mark)
            continue
        if id(n) in open_:
            continue
        open_.add(id(n))
        stack.append((n, True))
        stack.extend((c, False) for c in children if id(c) not in memo and id(c) not in open_)
    return memo[id(node)]


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing documents whose aliases expand past the bound."""

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _expanded(node, {})
        return node


def bounded_safe_load(stream: Union[str, bytes, IO]) -> Any:
    """``yaml.safe_load(stream)`` with :class:`BoundedSafeLoader`; a document nested
    past the recursion limit is a ``yaml.YAMLError`` too (not a RecursionError)."""
    try:
        return yaml.load(stream, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("nested too deeply (over the interpreter's recursion "
                             "limit)") from None
