"""Loading YAML configs safely: ``yaml.safe_load`` plus a bound on aliases ("billion laughs").

A YAML alias (``*a``) refers to an anchored node (``&a``) without copying it, so a few hundred bytes of
nested aliases expand to billions of values: parsing is instant, but anything that walks the result
(validation, error messages, ``repr``) runs for minutes and takes gigabytes. :func:`load_yaml` composes
the node graph first, counts the aliases and the size the document would have with every alias expanded,
and refuses documents over the limits, or whose aliases refer to themselves, before constructing anything.
Configs are small: the limits are far above any real recipe, mix or training config.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_ALIASES = 200  # alias uses (``*name``) per document
MAX_EXPANDED_NODES = 200_000  # nodes of the document with every alias expanded
_MAX_SNIPPET = 300


class YamlLoadError(ValueError):
    """A YAML document that cannot be loaded; the message names the file and says why."""


class YamlSyntaxError(YamlLoadError):
    """Not valid YAML."""


class YamlTooLargeError(YamlLoadError):
    """Valid YAML whose aliases expand to too much (or to an infinite, recursive structure)."""


class _CountingLoader(yaml.SafeLoader):
    """SafeLoader that counts alias uses while composing and stops as soon as there are too many."""

    max_aliases = MAX_ALIASES

    def __init__(self, stream):
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > self.max_aliases:
                mark = self.peek_event().start_mark
                raise _TooManyAliases(f"more than {self.max_aliases} aliases (line {mark.line + 1})")
        return super().compose_node(parent, index)


class _TooManyAliases(Exception):
    pass


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Node count of the document with every alias expanded, computed on the shared node graph (each
    distinct node is visited once); stops counting past ``limit``. Raises ``_Recursive`` on a cycle."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: a deeply nested document must not hit Python's recursion limit
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            if isinstance(node, yaml.SequenceNode):
                total = 1 + sum(sizes[id(c)] for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                total = 1 + sum(sizes[id(k)] + sizes[id(v)] for k, v in node.value)
            else:
                total = 1
            sizes[key] = min(total, limit + 1)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _Recursive()
        on_path.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [x for kv in node.value for x in kv]
        else:
            children = []
        for c in children:
            if id(c) in on_path:
                raise _Recursive()
            if id(c) not in sizes:
                stack.append((c, False))
    return sizes[id(root)]


class _Recursive(Exception):
    pass


def _short(text: str, n: int = _MAX_SNIPPET) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def load_yaml(text: str, where: str = "<yaml>", *, max_aliases: int = MAX_ALIASES,
              max_nodes: int = MAX_EXPANDED_NODES) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, refusing alias bombs and recursive aliases.

    Raises :class:`YamlSyntaxError` for invalid YAML and :class:`YamlTooLargeError` for a document using more
    than ``max_aliases`` aliases or expanding to more than ``max_nodes`` nodes; both messages start with
    ``where`` and fit on one line.
    """
    loader = _CountingLoader(text)
    loader.max_aliases = max_aliases
    try:
        try:
            node = loader.get_single_node()
        except _TooManyAliases as e:
            raise YamlTooLargeError(f"{where}: refused: the document uses {e}; YAML aliases (*name) are limited "
                                    f"to {max_aliases} per document so that a small file cannot expand to a huge "
                                    f"one") from None
        except yaml.YAMLError as e:
            raise YamlSyntaxError(f"{where}: not valid YAML: {_short(e)}") from None
        if node is None:
            return None
        try:
            size = _expanded_size(node, max_nodes)
        except _Recursive:
            raise YamlTooLargeError(f"{where}: refused: a YAML alias refers to the node that contains it "
                                    f"(recursive alias)") from None
        if size > max_nodes:
            raise YamlTooLargeError(f"{where}: refused: with its aliases expanded the document has more than "
                                    f"{max_nodes} values (YAML alias bomb?)") from None
        try:
            return loader.construct_document(node)
        except yaml.YAMLError as e:
            raise YamlSyntaxError(f"{where}: not valid YAML: {_short(e)}") from None
    finally:
        loader.dispose()


__all__ = ["load_yaml", "YamlLoadError", "YamlSyntaxError", "YamlTooLargeError", "MAX_ALIASES",
           "MAX_EXPANDED_NODES"]
