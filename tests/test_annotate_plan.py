"""`cuvee classify annotate -o FILE` is bound to its plan (issue #25): the input files (size, mtime, head/tail
SHA-256), the sample settings, the model and the prompt, recorded in `<out>.json`. A rerun against a rewritten
input or another input file is refused in one line, the file untouched, after a partial run (a kill's torn last
line) as after a finished one; an annotated id whose text changed is refused even when the stamps agree.
All through the real CLI against cuvee's OpenAI-compatible server on 127.0.0.1.
"""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.classifiers.llm_server import serve
from cuvee.cli import main


def write_docs(path: Path, prefix: str, n: int = 12, pad: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"{prefix}{i:03d}", "text": f"Document {prefix}{i} about tides and the moon. " + "x" * pad}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def swap_case_same_size(path: Path, ids=None) -> None:
    """Rewrite in place at the same size (the first letter of each chosen record's text flipped), mtime moved on."""
    st = path.stat()
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if ids is None or r["id"] in ids:
            r["text"] = r["text"][0].swapcase() + r["text"][1:]
        out.append(json.dumps(r))
    path.write_text("\n".join(out) + "\n")
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.fixture()
def srv():
    with serve(responder=lambda p, m, chat: ("Educational score: 2", 1, 1), model_name="m") as s:
        yield s


def cli(srv, src, out, *extra):
    return CliRunner().invoke(main, ["classify", "annotate", str(src), "--endpoint", srv.url, "--model", "m", "--n", "8",
                                         "--out", str(out), "--retries", "0", "--no-progress", *map(str, extra)])


def one_line_error(res) -> str:
    err = res.output.strip()
    assert res.exit_code == 1 and err.startswith("Error: ") and "\n" not in err and "Traceback" not in err, res.output
    return err


def snapshot(out: Path) -> dict:
    """Every file beside the annotations (records, summary, marker) with its bytes."""
    return {p.name: p.read_bytes() for p in out.parent.iterdir() if p.is_file() and not p.name.endswith(".lock")}


def ids(out: Path) -> list[str]:
    return [json.loads(x)["id"] for x in out.read_text().splitlines() if x.strip()]


def partial(srv, src, out):
    """A run cut short: 3 records, then a record torn by a kill."""
    assert cli(srv, src, out, "--limit", 3).exit_code == 0
    with open(out, "a") as f:
        f.write('{"id": "d011", "text": "Docu')


def finished(srv, src, out):
    res = cli(srv, src, out)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["remaining"] == 0 and len(ids(out)) == 8


@pytest.mark.parametrize("first", [partial, finished])
def test_input_rewritten_at_the_same_size_is_refused_untouched(srv, tmp_path, first):
    src, out = tmp_path / "in" / "docs.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d")
    first(srv, src, out)
    before, asked = snapshot(out), srv.requests
    swap_case_same_size(src)
    err = one_line_error(cli(srv, src, out))
    assert "different plan" in err and f"inputs.{src.resolve()}" in err and "--fresh" in err
    assert snapshot(out) == before and srv.requests == asked


@pytest.mark.parametrize("first", [partial, finished])
def test_another_input_file_into_the_same_out_is_refused_untouched(srv, tmp_path, first):
    src, other, out = tmp_path / "in" / "docs.jsonl", tmp_path / "in" / "other.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d")
    write_docs(other, "o")
    first(srv, src, out)
    before, asked = snapshot(out), srv.requests
    err = one_line_error(cli(srv, other, out))
    assert "different plan" in err and f"inputs.{other.resolve()}" in err and "another --out" in err
    assert snapshot(out) == before and srv.requests == asked
    # the original input still resumes / is still done, and --fresh starts the file over for the other input
    res = cli(srv, src, out)
    assert res.exit_code == 0, res.output
    assert sorted(ids(out)) == sorted(set(ids(out))) and len(ids(out)) == 8
    res = cli(srv, other, out, "--fresh")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["already_done"] == 0 and len(ids(out)) == 8
    assert all(i.startswith("o") for i in ids(out))


def test_changed_text_the_stamps_miss_is_refused(srv, tmp_path):
    """A document in the middle of a large file edited with size and mtime kept: the head/tail stamp agrees,
    the records' text_sha256 does not."""
    src, out = tmp_path / "in" / "docs.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d", n=300, pad=1000)  # ~300 KB: the head and tail 64 KiB leave the middle unhashed
    assert cli(srv, src, out, "--limit", 4).exit_code == 0
    done = set(ids(out))
    offsets, pos = {}, 0
    for line in src.read_text().splitlines(keepends=True):
        offsets[json.loads(line)["id"]] = pos
        pos += len(line.encode())
    middle = [i for i in done if 70_000 < offsets[i] < pos - 70_000]
    assert middle, "no annotated document in the unhashed middle; pick another layout"
    st = src.stat()
    swap_case_same_size(src, ids={middle[0]})
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    before, asked = snapshot(out), srv.requests
    err = one_line_error(cli(srv, src, out))
    assert repr(middle[0]) in err and "annotated from another text" in err
    assert snapshot(out) == before and srv.requests == asked


def test_settings_are_part_of_the_plan_but_a_larger_n_extends(srv, tmp_path):
    src, out = tmp_path / "in" / "docs.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d")
    assert cli(srv, src, out, "--n", 4).exit_code == 0
    plan = json.loads(Path(str(out) + ".json").read_text())["plan"]
    assert plan["model"] == "m" and plan["settings"]["seed"] == 0 and str(src.resolve()) in plan["inputs"]
    before = snapshot(out)
    err = one_line_error(cli(srv, src, out, "--n", 4, "--seed", 1))
    assert "settings.seed" in err and snapshot(out) == before
    res = cli(srv, src, out, "--n", 6)  # the sample for 6 contains the sample for 4
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["already_done"] == 4 and len(ids(out)) == 6


def test_annotations_without_a_recorded_plan_are_refused(srv, tmp_path):
    src, out = tmp_path / "in" / "docs.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d")
    assert cli(srv, src, out, "--limit", 2).exit_code == 0
    Path(str(out) + ".json").unlink()  # as an older cuvee left it: records and summary, no plan
    before = snapshot(out)
    err = one_line_error(cli(srv, src, out))
    assert "did not record their plan" in err and snapshot(out) == before


def test_out_among_the_inputs_is_refused(srv, tmp_path):
    src, out = tmp_path / "in" / "docs.jsonl", tmp_path / "a" / "ann.jsonl"
    write_docs(src, "d")
    assert cli(srv, src, out, "--limit", 2).exit_code == 0
    before = snapshot(out)
    err = one_line_error(cli(srv, out, out))  # cuvee's own records read back as documents
    assert "is one of the input files" in err and snapshot(out) == before
