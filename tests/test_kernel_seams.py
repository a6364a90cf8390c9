"""The kernel is the only place a run's promises are kept (issue #33): nothing else in ``cuvee/`` renames a file
into place, takes a ``flock``, imports the old ``cuvee.folders`` shim or claims a folder by hand, and every CLI
command is declared either read-only or as a writer whose product carries the kernel's marker and plan.

Read from the source with ``ast`` (the checker is tested on a probe file), so a new bypass fails here with the
file and line, before any reviewer has to find it."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1] / "cuvee"
KERNEL = ROOT / "kernel"
sys.path.insert(0, str(ROOT.parent / "benchmarks"))  # the fault-injection scenarios: the writers' tiny inputs

from _faults.common import cuvee as fi_cuvee
from _faults.common import env as fi_env

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


# ------------------------------------------------------------------------------------ the dynamic half
# Each writer run once on a tiny input (the fault-injection scenarios' setups, benchmarks/_faults/; the reference a
# fault-injection case of this session already produced is reused) and the kernel's proof looked for on disk: a
# workdir's marker of the declared kind and a plan whose recorded fingerprint is its binding's; an owned file's
# <file>.json marker with its kind and plan; a file written into a run folder only while its lock is held.

def _workdir(folder: Path, kind: str) -> None:
    from cuvee.kernel.workdir import MARKER, PLAN, fingerprint

    marker = json.loads((folder / MARKER).read_text())
    plan = json.loads((folder / PLAN).read_text())
    assert marker["kind"] == kind, (folder, marker)
    assert isinstance(plan["binding"], dict) and plan["fingerprint"] == fingerprint(plan["binding"]), folder


def _owned_file(path: Path, kind: str) -> None:
    from cuvee.kernel.owned_file import marker

    assert path.is_file(), path
    mark = json.loads(marker(path).read_text())
    assert mark["kind"] == kind and isinstance(mark["plan"], dict) and mark["plan"], (path, mark)


def _under_run_lock(argv: list[str], run_dir: Path, product: Path) -> None:
    """A concurrent holder of the run folder's lock makes the command refuse in one line with ``product``
    untouched; released, the same command writes it."""
    from cuvee.kernel.workdir import FolderLock

    before = product.read_bytes() if product.exists() else None
    with FolderLock(run_dir, "run folder"):
        r = subprocess.run(argv, capture_output=True, text=True, env=fi_env(), cwd=ROOT.parent, timeout=600)
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(err) == 1 and "in use by another cuvee process" in err[0], r.stderr[-2000:]
    assert (product.read_bytes() if product.exists() else None) == before
    r = subprocess.run(argv, capture_output=True, text=True, env=fi_env(), cwd=ROOT.parent, timeout=600)
    assert r.returncode == 0 and product.is_file(), r.stderr[-2000:]


def _reference(command: str, tmp: Path):
    """(scenario, reference output) of a fault-injection scenario: this session's, or one run now."""
    import importlib

    from _faults.common import Proc
    from _faults.driver import REFERENCES
    from fault_injection_commands import COMMANDS, scenario

    module, cls = COMMANDS[command]
    name = getattr(importlib.import_module(f"_faults.{module}"), cls).name
    if name in REFERENCES:
        return REFERENCES[name]
    scn = scenario(command, tmp, seed=0, quick=True)
    try:
        ref = scn.out(tmp, "ref")
        (tmp / "logs").mkdir(exist_ok=True)
        assert Proc(scn.argv(ref), tmp / "logs" / "ref.log").finish() == 0, (tmp / "logs" / "ref.log").read_text()[-3000:]
    finally:
        getattr(scn, "close", lambda: None)()
    return scn, ref


def _proofs(command: str, tmp: Path, demo=None) -> set[str]:
    """Run the command (or reuse its reference), check each proof it should leave; the forms proven."""
    def ref(scenario_name):
        return _reference(scenario_name, tmp / scenario_name)

    if command == "demo":  # conftest's one `cuvee demo` run (tests/test_demo.py reads it too)
        tmp, r = demo
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        _workdir(tmp / "demo", "run")
        _workdir(tmp / "demo" / "mix", "mix")
        assert (tmp / "demo" / "output" / ".cuvee-card.json").is_file()  # written under the run folder's lock
        return {"run, mix and card (each above)"}
    simple = {"run": ("run", "run"), "dedup run": ("dedup", "dedup"), "mix": ("mix", "mix"),
              "mix search": ("mix-search", "search"), "tokenizer train": ("tokenizer-train", "tokenizer"),
              "tokenizer extend": ("tokenizer-extend", "tokenizer"), "rephrase": ("rephrase", "rephrase")}
    if command in simple:
        name, kind = simple[command]
        _workdir(ref(name)[1], kind)
        return {f"workdir {kind}"}
    if command == "train":  # the training folder and the HF export folder it writes (train --export-hf)
        _, hf = ref("export-hf")
        _workdir(hf.parent / "train", "train")
        _workdir(hf, "eval")
        return {"workdir train"}
    if command == "anneal":  # its folder and each arm's training folder
        _, out = ref("anneal")
        _workdir(out, "train")
        for arm in ("candidate_seed0", "control_seed0"):
            _workdir(out / "runs" / arm, "train")
        return {"workdir train"}
    if command == "classify train":
        _owned_file(ref("classify-train")[1], "fasttext")
        _workdir(ref("classify-head")[1], "classifier")
        return {"workdir classifier", "owned file"}
    if command == "classify apply":
        _owned_file(ref("classify-apply")[1], "classify-apply")
        return {"owned file"}
    if command == "classify annotate":
        _owned_file(ref("annotate")[1], "classify-annotate")
        return {"owned file"}
    if command == "card":  # a card folder of its own (--out), and the run's output folder under the run's lock
        scn, out = ref("card")
        _workdir(out, "card")
        _under_run_lock(fi_cuvee("card", scn.run, "--max-token-docs", 50), scn.run, scn.run / "output" / "README.md")
        return {"workdir card", "run folder lock"}
    if command == "stats":
        scn, run = ref("stats")
        _under_run_lock(fi_cuvee("stats", run), run, run / "stats.json")
        return {"run folder lock"}
    raise AssertionError(f"no kernel-proof case for {command!r}: add one here")


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_leaves_the_kernels_proof_on_disk(command, tmp_path, request):
    def form(text: str) -> str:  # "run folder lock", "run, mix or training folder lock": a lock of another's folder
        return "folder lock" if text.endswith("folder lock") else text

    demo = request.getfixturevalue("demo_run") if command == "demo" else None
    proven = {form(f) for f in _proofs(command, tmp_path, demo)}
    declared = {form(f.strip()) for f in WRITERS[command].split("|")}
    assert declared <= proven, f"{command}: declared {declared}, proven {proven}"
