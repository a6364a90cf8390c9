"""`cuvee classify train` writes only into what cuvee owns, locked, bound to its plan (issue #25, folders.py).

Real files, real training (fastText on a few hundred lines: seconds), real locks held by a real lock object
from another open file, which is exactly what a second process would meet."""

import json
import random

import pytest
from click.testing import CliRunner

from cuvee.cli import main

GOOD = ["committee", "reviewed", "evidence", "published", "detailed", "report", "students", "science"]
BAD = ["click", "here", "buy", "cheap", "deals", "free", "shipping", "login"]


@pytest.fixture()
def data(tmp_path):
    rng = random.Random(0)
    rows = [{"text": " ".join(rng.choice(v) for _ in range(12)), "label": lab}
            for _ in range(120) for v, lab in ((GOOD, "hq"), (BAD, "lq"))]
    p = tmp_path / "labelled.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def train(data, out, *extra):
    return CliRunner().invoke(main, ["classify", "train", "--data", str(data), "-o", str(out), "--epoch", "2", "--dim", "8",
                                         "--bucket", "100000", "--threads", "1", *map(str, extra)])


def one_line(res):
    err = res.output.strip().splitlines()[-1]
    assert res.exit_code == 1 and err.startswith("Error: ") and "Traceback" not in res.output, res.output
    return err


def test_fasttext_output_that_cuvee_did_not_write_is_refused_untouched(data, tmp_path):
    out = tmp_path / "model.bin"
    out.write_bytes(b"my own precious bytes")
    err = one_line(train(data, out))
    assert "not written by cuvee" in err and out.read_bytes() == b"my own precious bytes"
    assert not (tmp_path / "model.bin.json").exists()


def test_fasttext_rerun_same_plan_ok_other_plan_refused_fresh_replaces(data, tmp_path):
    out = tmp_path / "model.bin"
    res = train(data, out)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "model.bin.json").read_text())["plan"]["settings"]["dim"] == 8
    assert train(data, out).exit_code == 0  # the same plan: retrained in place
    before = out.read_bytes()
    err = one_line(train(data, out, "--lr", "0.05"))
    assert "different plan" in err and "settings.lr" in err and out.read_bytes() == before
    res = train(data, out, "--lr", "0.05", "--fresh")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "model.bin.json").read_text())["plan"]["settings"]["lr"] == 0.05


def test_fasttext_output_in_use_by_another_process_is_refused(data, tmp_path):
    from cuvee.kernel.workdir import FolderLock

    out = tmp_path / "model.bin"
    held = FolderLock(tmp_path, lock_name=".model.bin.cuvee.lock").acquire()
    try:
        err = one_line(train(data, out))
    finally:
        held.release()
    assert "another cuvee process" in err and not out.exists()


def test_transformer_head_folder_is_claimed_as_a_classifier_folder(data, tmp_path):
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    err = one_line(CliRunner().invoke(main, ["classify", "train", "--kind", "transformer", "--data", str(data), "-o", str(foreign),
                                                 "--epoch", "5", "--max-length", "16"]))
    assert "did not create" in err and sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    head = tmp_path / "head"
    res = CliRunner().invoke(main, ["classify", "train", "--kind", "transformer", "--data", str(data), "-o", str(head),
                                        "--epoch", "5", "--max-length", "16"])
    assert res.exit_code == 0, res.output
    assert json.loads((head / ".cuvee-owner.json").read_text())["kind"] == "classifier"
    assert (head / ".cuvee-plan.json").exists() and (head / "head.json").exists()


def test_fasttext_training_is_the_same_model_whatever_the_process_did_before(data, tmp_path):
    """fastText 0.9.2 leaves most of its input matrix as the allocator hands it back: in a process that has
    allocated and freed large buffers (here: earlier fastText trainings in this very process, and a heap dirtied
    with 0xFF bytes) the same data, settings and seed gave another model, or "Encountered NaN.". cuvee trains in a
    fresh child process, so five trainings are byte-identical."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    blocks = [libc.malloc(7 << 20) for _ in range(8)]
    for b in blocks:
        ctypes.memset(b, 0xFF, 7 << 20)
    for b in blocks:
        libc.free(b)
    digests = []
    for i in range(5):
        out = tmp_path / f"m{i}.bin"
        assert train(data, out).exit_code == 0
        digests.append(out.read_bytes())
    assert all(d == digests[0] for d in digests[1:])
