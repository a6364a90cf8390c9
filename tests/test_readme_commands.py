"""Every command the README shows works on the bundled data as written.

Each fenced ``bash``/``sh``/``shell`` block of README.md runs as one script (``set -e``), as a subprocess, in
README order, in one fresh folder holding the checkout's ``recipes/``, ``mixes/``, ``configs/`` and ``data/``
(a new user's working copy, who then follows the README from the top: later blocks see earlier blocks' runs). An install line ``pip install ... && CMD`` runs only ``CMD``; a bare
``pip install`` line is skipped. ``<!-- no-test: why -->`` on the line before a block skips it (use
sparingly: the test-suite line, a SLURM submission). Blocks added later are picked up by themselves.
Inline commands naming a file (``cuvee mix mixes/x.yaml``) must appear in a tested block; placeholders in
capitals (``cuvee card RUN_DIR``) are not commands. The FineWeb recipe example must be recipes/fineweb.yaml.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SHELLS = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
NO_TEST = re.compile(r"<!--\s*no-test\b")


def blocks(text: str) -> list[tuple[int, str, str, bool]]:
    """(line number, language, body, skipped) of every fenced block."""
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").splitlines()
        skipped = bool(before) and bool(NO_TEST.search(before[-1]))
        out.append((len(before) + 1, m.group(1).lower(), m.group(2), skipped))
    return out


def script(body: str) -> str:
    """The block as it runs: install lines reduced to what follows their `&&`, comments dropped."""
    lines = []
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("pip install"):
            if "&&" not in line:
                continue
            line = line.split("&&", 1)[1].strip()
        lines.append(line)
    return "\n".join(lines)


SHELL_BLOCKS = [(n, b) for n, lang, b, skipped in blocks(README.read_text()) if lang in SHELLS and not skipped]


def test_readme_has_tested_blocks_and_skips_are_few():
    all_shell = [b for b in blocks(README.read_text()) if b[1] in SHELLS]
    assert len(SHELL_BLOCKS) >= 2 and len(all_shell) - len(SHELL_BLOCKS) <= 2


def test_inline_commands_naming_files_are_tested():
    text = README.read_text()
    tested = "\n".join(script(b) for _, b in SHELL_BLOCKS)
    inline = re.findall(r"(?<!`)`(cuvee [^`\n]+)`(?!`)", FENCE.sub("", text))
    concrete = [c for c in inline if not re.search(r"\b[A-Z][A-Z_]{2,}\b", c) and re.search(r"/|\.ya?ml\b", c)]
    assert concrete, inline
    assert [c for c in concrete if c not in tested] == []


def test_fineweb_recipe_example_is_recipes_fineweb_yaml():
    from cuvee.pipeline.recipe import parse_recipe

    examples = [b for _, lang, b, _ in blocks(README.read_text()) if lang == "yaml" and b.startswith("name: fineweb")]
    assert len(examples) == 1
    shown = parse_recipe(yaml.safe_load(examples[0]), "README.md").to_dict()
    real = parse_recipe(yaml.safe_load((REPO / "recipes/fineweb.yaml").read_text()), "recipes/fineweb.yaml").to_dict()
    assert shown == real


def test_readme_makes_no_false_download_claim():
    text = README.read_text()
    assert "No code downloads anything" not in text
    assert "common_crawl" in text and "hub" in text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One working copy for every block, run top to bottom as a reader follows the README: a later block finds
    what the earlier ones wrote (its `cuvee demo` resumes the finished run instead of redoing it), so a block whose
    command would clash with an earlier one's folder (another plan, another kind) fails here as it would for them."""
    tmp = tmp_path_factory.mktemp("readme")
    for name in ("recipes", "mixes", "configs"):
        shutil.copytree(REPO / name, tmp / name)
    (tmp / "data").symlink_to(REPO / "data", target_is_directory=True)  # read-only inputs
    return tmp


@pytest.mark.slow
@pytest.mark.parametrize("line,body", SHELL_BLOCKS, ids=[f"README.md:{n}" for n, _ in SHELL_BLOCKS])
def test_readme_block_runs(workdir, line, body):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script(body)], cwd=workdir, env=env, capture_output=True,
                       text=True, check=False, timeout=1800, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"README.md:{line} failed\n{script(body)}\n--- stdout\n{r.stdout[-3000:]}\n" \
                              f"--- stderr\n{r.stderr[-3000:]}"
