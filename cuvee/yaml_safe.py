r"""Loading YAML configs safely: ``yaml.safe_load`` plus bounds on aliases, nesting and expanded size.

A YAML alias (``*a``) refers to an anchored node (``&a``) without copying it, so a few hundred bytes of
nested aliases expand to billions of values, and one long string aliased a hundred times to gigabytes:
parsing is instant, but anything that walks the result (validation, error messages, ``repr``) runs for
minutes and takes gigabytes. Deep nesting (``[[[[...``) overflows PyYAML's recursive composer.
:func:`load_yaml` composes the node graph with a depth bound, counts the aliases, the values and the
scalar bytes the document would have with every alias expanded, and refuses documents over the limits,
or whose aliases refer to themselves, before constructing anything. Every refusal is one short line.
Configs are small: the limits are far above any real recipe, mix or training config. Every YAML file or
value cuvee reads goes through here (``grep -rn "yaml\.\(safe_\)\?load" cuvee`` finds none elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from cuvee.kernel.errors import UserError

MAX_ALIASES = 200  # alias uses (``*name``) per document
MAX_EXPANDED_NODES = 200_000  # nodes of the document with every alias expanded
MAX_EXPANDED_BYTES = 16 << 20  # UTF-8 bytes of scalars with every alias expanded (beyond the file's own size)
MAX_DEPTH = 100  # nested sequences / mappings
_MAX_SNIPPET = 300


class YamlLoadError(UserError, ValueError):
    """A YAML document that cannot be loaded; the message names the file and says why."""


class YamlSyntaxError(YamlLoadError):
    """Not valid YAML."""


class YamlTooLargeError(YamlLoadError):
    """Valid YAML whose aliases expand to too much (or to an infinite, recursive structure)."""


class _CountingLoader(yaml.SafeLoader):
    """SafeLoader that counts alias uses and nesting depth while composing and stops as soon as either
    is over its limit (the composer is recursive: depth must be bounded before Python's stack is)."""

    def __init__(self, stream, max_aliases: int, max_depth: int):
        super().__init__(stream)
        self.max_aliases, self.max_depth = max_aliases, max_depth
        self.alias_count = 0
        self.depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > self.max_aliases:
                mark = self.peek_event().start_mark
                raise _TooManyAliases(f"more than {self.max_aliases} aliases (line {mark.line + 1})")
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                mark = self.peek_event().start_mark
                raise _TooDeep(f"nested more than {self.max_depth} levels deep (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _tagged_loader(tags) -> type[_CountingLoader]:
    """The same limits, and each named application tag on a scalar built by its function from the scalar's text
    (lm-eval's ``!function utils.f`` into an inert reference): nothing is imported or run here, and any other
    tag, or a named tag on a list or mapping, is refused as invalid YAML."""

    class _Tagged(_CountingLoader):
        pass

    for tag, build in tags.items():
        _Tagged.add_constructor(tag, lambda loader, node, build=build: build(loader.construct_scalar(node)))
    return _Tagged


class _TooManyAliases(Exception):
    pass


class _TooDeep(Exception):
    pass


def _expanded_size(root: yaml.Node, limit: int, byte_limit: int) -> tuple[int, int]:
    """(nodes, scalar UTF-8 bytes) of the document with every alias expanded, computed on the shared node
    graph (each distinct node is visited once); stops counting past the limits. Raises ``_Recursive`` on
    a cycle."""
    sizes: dict[int, int] = {}
    nbytes: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: a deeply nested document must not hit Python's recursion limit
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            if isinstance(node, yaml.SequenceNode):
                kids = [id(c) for c in node.value]
            elif isinstance(node, yaml.MappingNode):
                kids = [id(x) for kv in node.value for x in kv]
            else:
                kids = []
            total = 1 + sum(sizes[k] for k in kids)
            size_b = sum(nbytes[k] for k in kids) if kids else len(str(node.value).encode("utf-8", "replace"))
            sizes[key] = min(total, limit + 1)
            nbytes[key] = min(size_b, byte_limit + 1)
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
    return sizes[id(root)], nbytes[id(root)]


class _Recursive(Exception):
    pass


def _short(text: str, n: int = _MAX_SNIPPET) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def load_yaml(text: str, where: str = "<yaml>", *, max_aliases: int = MAX_ALIASES,
              max_nodes: int = MAX_EXPANDED_NODES, max_bytes: int = MAX_EXPANDED_BYTES,
              max_depth: int = MAX_DEPTH, tags: Mapping[str, Callable[[str], Any]] | None = None) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, refusing alias bombs, recursive aliases and deep nesting.

    Raises :class:`YamlSyntaxError` for invalid YAML and :class:`YamlTooLargeError` for a document using more
    than ``max_aliases`` aliases, nested more than ``max_depth`` levels, or expanding to more than
    ``max_nodes`` nodes or more scalar bytes than ``max_bytes`` (or than the text itself, if larger);
    every message starts with ``where``, fits on one line and is at most a few hundred characters.
    ``tags``: ``{tag: build}`` for files written for other tools (lm-eval task YAMLs): a scalar with one of these
    tags (``!function utils.f``) becomes ``build(text)``; any other tag is an error, as without ``tags``.
    """
    where = _short(where, 200)
    if not isinstance(text, str):
        raise YamlSyntaxError(f"{where}: not valid YAML: expected text, got {type(text).__name__}")
    loader = (_tagged_loader(tags) if tags else _CountingLoader)(text, max_aliases, max_depth)
    byte_limit = max(max_bytes, len(text.encode("utf-8", "replace")))
    try:
        try:
            node = loader.get_single_node()
        except _TooManyAliases as e:
            raise YamlTooLargeError(f"{where}: refused: the document uses {e}; YAML aliases (*name) are limited "
                                    f"to {max_aliases} per document so that a small file cannot expand to a huge "
                                    f"one") from None
        except (_TooDeep, RecursionError) as e:
            detail = e if isinstance(e, _TooDeep) else "nested too deeply"
            raise YamlTooLargeError(f"{where}: refused: the document is {detail}; YAML nesting is limited to "
                                    f"{max_depth} levels") from None
        except yaml.YAMLError as e:
            raise YamlSyntaxError(f"{where}: not valid YAML: {_short(e)}") from None
        if node is None:
            return None
        try:
            size, size_b = _expanded_size(node, max_nodes, byte_limit)
        except _Recursive:
            raise YamlTooLargeError(f"{where}: refused: a YAML alias refers to the node that contains it "
                                    f"(recursive alias)") from None
        if size > max_nodes:
            raise YamlTooLargeError(f"{where}: refused: with its aliases expanded the document has more than "
                                    f"{max_nodes} values (YAML alias bomb?)") from None
        if size_b > byte_limit:
            raise YamlTooLargeError(f"{where}: refused: with its aliases expanded the document holds more than "
                                    f"{byte_limit:,} bytes of text (YAML alias bomb?)") from None
        try:
            return loader.construct_document(node)
        except (yaml.YAMLError, RecursionError) as e:
            raise YamlSyntaxError(f"{where}: not valid YAML: {_short(e)}") from None
    finally:
        loader.dispose()


__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_EXPANDED_BYTES",
    "MAX_EXPANDED_NODES",
    "YamlLoadError",
    "YamlSyntaxError",
    "YamlTooLargeError",
    "load_yaml",
]
