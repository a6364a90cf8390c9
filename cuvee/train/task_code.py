"""What an lm-eval task YAML would execute, found before lm-eval loads it.

lm-eval's task loader imports Python for every ``!function module.name`` tag (``process_docs``,
``doc_to_text``, ``class``, metrics ...), from a file next to the YAML or from any importable module, and
follows ``include:`` into other YAMLs. Loading a task someone sent you is therefore running their code.
:func:`task_code` reads the YAML (and its includes) as plain node graphs - nothing constructed, nothing
imported - and lists every ``!function`` with the Python file it would load, so the caller can refuse or
warn before lm-eval sees the file. Aliases are counted by expanded size, so a "billion laughs" task file is
refused here instead of hanging lm-eval's own loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

MAX_TASK_BYTES = 1 << 20
MAX_EXPANDED_NODES = 200_000
MAX_INCLUDE_DEPTH = 16


class TaskFileError(ValueError):
    """A task YAML that cannot be read safely; the message is one line naming the file."""


@dataclass(frozen=True)
class TaskCode:
    """One ``!function`` reference: the YAML that holds it, the reference, and the file it would import."""

    yaml_file: Path
    reference: str
    python_file: Path | None  # None: an importable module name, not a file next to the YAML

    def describe(self) -> str:
        where = self.python_file or f"module {self.reference.rpartition('.')[0]}"
        return f"{self.yaml_file} runs Python from {where} (!function {self.reference})"


class _Composer(yaml.SafeLoader):
    """Composes nodes only; ``!function`` and other tags are never constructed."""


def _compose(path: Path) -> yaml.Node | None:
    try:
        if path.stat().st_size > MAX_TASK_BYTES:
            raise TaskFileError(f"task file {path}: larger than {MAX_TASK_BYTES} bytes; refused")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFileError(f"task file {path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    loader = _Composer(text)
    try:
        return loader.get_single_node()
    except yaml.YAMLError as e:
        raise TaskFileError(f"task file {path}: not valid YAML: {' '.join(str(e).split())[:300]}") from None
    finally:
        loader.dispose()


def _walk(root: yaml.Node, path: Path) -> list[yaml.Node]:
    """Every distinct node once (aliases share nodes), refusing documents that expand past the limit."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    order: list[yaml.Node] = []
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes or (not done and id(node) in visiting):
            continue
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not done:
            visiting.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes and id(c) not in visiting)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) for c in children)  # a recursive alias counts once
        if sizes[id(node)] > MAX_EXPANDED_NODES:
            raise TaskFileError(f"task file {path}: with its aliases expanded it has more than {MAX_EXPANDED_NODES} "
                                f"values (YAML alias bomb?); refused")
        order.append(node)
    return order


def _includes(root: yaml.Node) -> list[str]:
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "include":
            if isinstance(value, yaml.ScalarNode):
                return [value.value]
            if isinstance(value, yaml.SequenceNode):
                return [v.value for v in value.value if isinstance(v, yaml.ScalarNode)]
    return []


def task_code(path: str | Path, _depth: int = 0) -> list[TaskCode]:
    """Every ``!function`` in the task YAML at ``path`` and the YAMLs it includes (as lm-eval resolves them)."""
    path = Path(path).expanduser().resolve()
    if _depth > MAX_INCLUDE_DEPTH:
        raise TaskFileError(f"task file {path}: includes nest deeper than {MAX_INCLUDE_DEPTH} (an include cycle?)")
    root = _compose(path)
    if root is None:
        return []
    found = []
    for node in _walk(root, path):
        if isinstance(node, yaml.ScalarNode) and node.tag == "!function":
            module = node.value.rpartition(".")[0]
            local = (path.parent / f"{module.replace('.', '/')}.py").resolve() if module else None
            found.append(TaskCode(path, node.value, local if local is not None and local.exists() else None))
    for inc in _includes(root):
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        if inc_path.exists():  # lm-eval reports a missing include itself
            found.extend(task_code(inc_path, _depth + 1))
    return found
