"""Every command, given a bad config or argument, ends in ONE line on stderr and a non-zero exit: no traceback
(tracebacks only with -v / CUVEE_DEBUG=1). Run through the real CLI, as a subprocess, from a folder that is
not the checkout. A command added to `cuvee` without a case here fails `test_every_command_has_a_case`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from cuvee.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"

# file name -> content, written into the test's folder
FILES = {
    "syntax.yaml": "name: x\nstages: [1, 2\n",  # YAML syntax error
    "list.yaml": "- 1\n- 2\n",  # the wrong type: a list where a mapping is expected
    "badtasks.yaml": f"name: x\ninput: {{paths: ['{SAMPLE}']}}\nexecutor: {{kind: local, tasks: many}}\n",
    "notes.txt": "hello\n",
    "docs.jsonl": '{"text": "a document", "id": "1"}\n',
    "labelled.jsonl": '{"text": "a document", "id": "1", "label": "hq"}\n',
    "userdir/keep.txt": "the user's own file\n",
    "badrun/recipe.yaml": "name: [\n",
}

# (command words, arguments); placeholders: {d} = the test folder
CASES = [
    ("run", ["{d}/nope.yaml"]),
    ("run", ["{d}/syntax.yaml"]),
    ("run", ["{d}/list.yaml"]),
    ("run", ["{d}/badtasks.yaml"]),
    ("run", ["{d}/badtasks.yaml", "--tasks", "lots"]),
    ("validate", ["{d}/nope.yaml"]),
    ("validate", ["{d}/syntax.yaml"]),
    ("validate", ["{d}/badtasks.yaml"]),
    ("stats", ["{d}/nope"]),
    ("stats", ["{d}/syntax.yaml"]),
    ("stats", ["{d}/userdir"]),
    ("stages", ["no_such_stage"]),
    ("card", ["{d}/nope"]),
    ("card", ["{d}/userdir"]),
    ("card", ["{d}/badrun"]),
    ("mix", ["{d}/nope.yaml"]),
    ("mix", ["{d}/syntax.yaml"]),
    ("mix", ["{d}/list.yaml"]),
    ("mix search", ["{d}/nope.yaml"]),
    ("mix search", ["{d}/syntax.yaml"]),
    ("mix search", ["{d}/list.yaml"]),
    ("mix search", ["{d}/list.yaml", "--workers", "0"]),
    ("mix search", ["{d}/list.yaml", "--workers", "two"]),
    ("mix search", ["{d}/list.yaml", "--devices", "0,x"]),
    ("mix search", ["{d}/list.yaml", "--devices", "1,1"]),
    ("mix search", ["{d}/list.yaml", "--slurm", "--devices", "0,1"]),
    ("mix search", ["{d}/list.yaml", "--no-wait"]),
    ("mix search", ["{d}/list.yaml", "--slurm", "--partition", "a b"]),
    ("mix search", ["{d}/list.yaml", "--slurm", "--time", "soon"]),
    ("tokenizer train", ["{d}/syntax.yaml", "--out", "{d}/tok.json"]),
    ("tokenizer train", ["{d}/list.yaml", "--out", "{d}/tok.json"]),
    ("tokenizer extend", ["--text", "{d}/nope.txt", "--out", "{d}/x.tiktoken"]),
    ("tokenizer compression", ["--tokenizer", "no_such_tokenizer", "--text", "en={d}/notes.txt"]),
    ("tokenizer compression", ["--tokenizer", "gpt2", "--text", "{d}/notes.txt"]),
    ("classify annotate", ["{d}/nope.jsonl", "-o", "{d}/a.jsonl", "-m", "{d}/no_model"]),
    ("classify apply", ["-m", "{d}/no_model.bin", "-i", "{d}/docs.jsonl", "-o", "{d}/out.jsonl"]),
    ("classify eval", ["-m", "{d}/no_model.bin", "--data", "{d}/labelled.jsonl"]),
    ("classify train", ["--data", "{d}/nope.jsonl", "-o", "{d}/model.bin"]),
    ("dedup run", ["exact_dedup", "{d}/nope.jsonl", "-w", "{d}/w"]),
    ("dedup run", ["no_such_dedup", "{d}/docs.jsonl", "-w", "{d}/w"]),
    ("dedup scurve", ["--bands", "zero"]),
    ("train", ["{d}/syntax.yaml"]),
    ("train", ["{d}/list.yaml"]),
    ("train", [str(REPO / "configs/train/tiny.yaml"), "--set", "seq_len=0"]),
    ("anneal", ["{d}/syntax.yaml"]),
    ("anneal", ["{d}/list.yaml"]),
    ("anneal", [str(REPO / "configs/train/anneal_demo.yaml"), "--set", "spending=pocok"]),
    ("anneal", [str(REPO / "configs/train/anneal_demo.yaml"), "--set", "equivalence_margin_abs=0.01"]),
    ("eval-downstream", ["{d}/nope", "--task", "x"]),
    ("eval-downstream", ["{d}/userdir", "--task", "no_such_task"]),
    ("rephrase", ["{d}/nope.jsonl", "-o", "{d}/r", "-p", "wikipedia", "-m", "{d}/no_model"]),
    ("rephrase", ["{d}/docs.jsonl", "-o", "{d}/r", "-p", "wikipedai", "-m", "{d}/no_model"]),
    ("rephrase", ["{d}/docs.jsonl", "-o", "{d}/userdir", "-p", "wikipedia", "-m", "x",
                  "--endpoint", "http://127.0.0.1:9/v1"]),
    ("trace", ["{d}/nope", "--token", "0"]),
    ("trace", ["{d}/userdir", "--token", "0"]),
    ("trace", ["{d}/userdir", "--token", "-3"]),
    ("demo", ["--run-dir", "{d}/userdir"]),
    ("demo", ["--run-dir", "{d}/notes.txt"]),
]


def _leaves(cmd: click.Command, path: tuple[str, ...], ctx: click.Context):
    if isinstance(cmd, click.Group):
        if cmd.invoke_without_command:  # `cuvee mix CONFIG` runs the group itself
            yield " ".join(path)
        for name in cmd.list_commands(ctx):
            yield from _leaves(cmd.get_command(ctx, name), path + (name,), ctx)
    else:
        yield " ".join(path)


def test_every_command_has_a_case():
    commands = set(_leaves(main, (), click.Context(main)))
    assert commands == {c for c, _ in CASES}, commands ^ {c for c, _ in CASES}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return d


def _cuvee(folder: Path, words: str, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    argv = words.split() + [a.replace("{d}", str(folder)) for a in args]
    environ = {**os.environ, "CUVEE_CACHE_DIR": str(folder / "cache"), "HF_HUB_OFFLINE": "1", **(env or {})}
    environ.pop("CUVEE_DEBUG", None) if env is None else None
    return subprocess.run([sys.executable, "-m", "cuvee.cli", *argv], cwd=folder, capture_output=True, text=True,
                          check=False, timeout=300, env=environ, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("words,args", CASES, ids=[f"{c}:{' '.join(a)[:40]}" for c, a in CASES])
def test_bad_input_is_one_line_on_stderr(folder, words, args):
    r = _cuvee(folder, words, args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    assert len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("Error: "), lines


BOOM = """
import sys
import click
from cuvee.cli import main

@main.command("boom")
def boom():
    raise RuntimeError("disk on fire\\nsecond line")

main(prog_name="cuvee")
"""


@pytest.mark.parametrize("how", ["quiet", "-v", "--verbose", "CUVEE_DEBUG"])
def test_unexpected_error_traceback_only_when_asked(folder, how):
    env = {k: v for k, v in os.environ.items() if k != "CUVEE_DEBUG"}
    argv = ["boom"] if how in ("quiet", "CUVEE_DEBUG") else [how, "boom"]
    if how == "CUVEE_DEBUG":
        env["CUVEE_DEBUG"] = "1"
    r = subprocess.run([sys.executable, "-c", BOOM, *argv], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1
    last = r.stderr.rstrip().splitlines()[-1]
    assert last.startswith("Error: RuntimeError: disk on fire; second line") and "-v" in last, r.stderr
    if how == "quiet":
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    else:
        assert "Traceback" in r.stderr and ", in boom" in r.stderr, r.stderr
