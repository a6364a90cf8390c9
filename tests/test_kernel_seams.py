"""The kernel is the only place a run's promises are kept (issue #33): nothing else in ``cuvee/`` renames a file
into place, takes a ``flock``, imports the old ``cuvee.folders`` shim or claims a folder by hand, and every CLI
command is declared either read-only or as a writer whose product carries the kernel's marker and plan.

Read from the source with ``ast`` (the checker is tested on a probe file), so a new bypass fails here with the
file and line, before any reviewer has to find it."""

import ast
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1] / "cuvee"
KERNEL = ROOT / "kernel"

# (module, attribute) calls only the kernel may make
_FORBIDDEN_CALLS = {("os", "replace"): "an atomic rename (use cuvee.kernel.atomic)",
                    ("os", "rename"): "an atomic rename (use cuvee.kernel.atomic)",
                    ("fcntl", "flock"): "a lock (use cuvee.kernel.workdir.FolderLock)",
                    ("fcntl", "lockf"): "a lock (use cuvee.kernel.workdir.FolderLock)"}
_FORBIDDEN_IMPORTS = {"fcntl": "locks are the kernel's", "cuvee.folders": "the old shim: import cuvee.kernel.*"}
_FORBIDDEN_NAMES = {"claim", "empty_owned", "clean_stale_tmp", "FolderLock", "bind"}  # `locked` alone: writing into
# another command's folder under its lock (card, stats) is the kernel's lock, not a second preamble


def bypasses(path: Path) -> list[str]:
    """``file:line what`` for every place ``path`` keeps a promise by hand instead of through the kernel."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else None
            if (name, node.func.attr) in _FORBIDDEN_CALLS:
                out.append(f"{path}:{node.lineno} {name}.{node.func.attr}: {_FORBIDDEN_CALLS[(name, node.func.attr)]}")
            elif node.func.attr == "rename" and not (isinstance(owner, ast.Name) and owner.id in ("os",)):
                out.append(f"{path}:{node.lineno} .rename(): an atomic rename (use cuvee.kernel.atomic)")
        elif isinstance(node, ast.Import):
            out += [f"{path}:{node.lineno} import {a.name}: {_FORBIDDEN_IMPORTS[a.name]}"
                    for a in node.names if a.name in _FORBIDDEN_IMPORTS]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in _FORBIDDEN_IMPORTS:
                out.append(f"{path}:{node.lineno} from {node.module}: {_FORBIDDEN_IMPORTS[node.module]}")
            elif node.module == "cuvee.kernel.workdir":
                out += [f"{path}:{node.lineno} {a.name}: the folder preamble by hand (use open_workdir / owned)"
                        for a in node.names if a.name in _FORBIDDEN_NAMES]
    return out


def test_the_checker_finds_each_kind_of_bypass(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os, fcntl\nfrom pathlib import Path\nfrom cuvee.folders import claim\n"
                     "from cuvee.kernel.workdir import claim\n"
                     "def f(p):\n    os.replace(p, p)\n    Path(p).rename(p)\n    fcntl.flock(3, 2)\n")
    found = "\n".join(bypasses(probe))
    for what in ("os.replace", ".rename()", "fcntl.flock", "import fcntl", "from cuvee.folders", "claim"):
        assert what in found, what


@pytest.mark.parametrize("path", sorted(p for p in ROOT.rglob("*.py") if KERNEL not in p.parents),
                         ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_promise_is_kept_outside_the_kernel(path):
    found = bypasses(path)
    assert not found, "keep these promises through cuvee/kernel:\n" + "\n".join(found)


# Every CLI command, declared. A writer names what carries the kernel's proof on disk: a workdir (marker
# .cuvee-owner.json of that kind + .cuvee-plan.json) or an owned file (<file>.json marker). A new command
# fails test_every_command_is_declared until it is added here, and its writer test shows it uses the kernel.
WRITERS = {
    "run": "workdir run", "dedup run": "workdir dedup", "mix": "workdir mix", "mix search": "workdir search",
    "tokenizer train": "workdir tokenizer", "tokenizer extend": "workdir tokenizer", "train": "workdir train",
    "anneal": "workdir train", "classify train": "workdir classifier | owned file", "classify apply": "owned file",
    "classify annotate": "owned file", "rephrase": "workdir rephrase", "card": "workdir card | run, mix or training folder lock",
    "stats": "run folder lock", "demo": "run, mix and card (each above)",
}
READ_ONLY = {"validate", "stages", "eval-downstream", "tokenizer compression", "classify eval", "dedup scurve",
             "trace"}


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> list[str]:
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            sub = _commands(cmd, click.Context(cmd, parent=ctx), full + " ")
            out += sub if sub else [full]
            if cmd.invoke_without_command or cmd.callback is not None and not cmd.no_args_is_help:
                out.append(full)
        else:
            out.append(full)
    return out


def test_every_command_is_declared():
    from cuvee.cli import main

    commands = set(_commands(main, click.Context(main)))
    undeclared = sorted(c for c in commands if c not in WRITERS and c not in READ_ONLY)
    assert not undeclared, f"declare these commands in WRITERS or READ_ONLY: {undeclared}"
    assert not (set(WRITERS) | READ_ONLY) - commands, "declared commands that do not exist"
    assert not set(WRITERS) & READ_ONLY
