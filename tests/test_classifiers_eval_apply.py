"""`cuvee classify eval` refuses data it cannot measure, and `classify apply -o FILE` writes only what cuvee owns
(issue #25: folders.py contract, as annotate and train). Real fastText models trained on a few hundred lines."""

import json
import random

import pytest
from click.testing import CliRunner

from cuvee.cli import main

GOOD = ["committee", "reviewed", "evidence", "published", "detailed", "report", "students", "science"]
BAD = ["click", "here", "buy", "cheap", "deals", "free", "shipping", "login"]


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model")
    rng = random.Random(0)
    rows = [{"text": " ".join(rng.choice(v) for _ in range(12)), "label": lab}
            for _ in range(120) for v, lab in ((GOOD, "hq"), (BAD, "lq"))]
    data = write_rows(tmp / "labelled.jsonl", rows)
    out = tmp / "model.bin"
    res = CliRunner().invoke(main, ["classify", "train", "--data", str(data), "-o", str(out), "--epoch", "2", "--dim", "16",
                                        "--bucket", "100000", "--threads", "1"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture()
def docs(tmp_path):
    rng = random.Random(1)
    return write_rows(tmp_path / "docs.jsonl", [{"id": f"d{i}", "text": " ".join(rng.choice(GOOD if i % 2 else BAD)
                                                                                   for _ in range(10))}
                                                for i in range(20)])


def one_line(res):
    err = res.output.strip().splitlines()[-1]
    assert res.exit_code == 1 and err.startswith("Error: ") and "Traceback" not in res.output, res.output
    return err


def evaluate(model, data, *extra):
    return CliRunner().invoke(main, ["classify", "eval", "-m", str(model), "--data", str(data), *extra])


def test_eval_without_labels_is_refused(model, docs):
    err = one_line(evaluate(model, docs))
    assert "no labelled rows" in err and "missing_label 20" in err and "'label'" in err


def test_eval_with_one_class_is_refused(model, tmp_path):
    data = write_rows(tmp_path / "only_hq.jsonl", [{"text": "the committee reviewed the evidence", "label": "hq"}] * 5)
    err = one_line(evaluate(model, data))
    assert "only one class present in 5 labelled rows" in err and "labels: hq" in err
    both = write_rows(tmp_path / "both.jsonl", [{"text": "the committee reviewed the evidence", "label": "hq"},
                                                {"text": "click here buy cheap", "label": "lq"}])
    err = one_line(evaluate(model, both, "--positive-label", "good"))  # a label the data never carries
    assert "only one class present" in err and "'good': 0 rows" in err
    res = evaluate(model, both)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["roc_auc"] == 1.0


def apply(model, docs, out, *extra):
    return CliRunner().invoke(main, ["classify", "apply", "-m", str(model), "-i", str(docs), "-o", str(out), *map(str, extra)])


def test_apply_never_overwrites_a_file_cuvee_did_not_write(model, docs, tmp_path):
    out = tmp_path / "kept.jsonl"
    out.write_text('{"text": "my own notes"}\n')
    err = one_line(apply(model, docs, out))
    assert "not written by cuvee classify apply" in err and out.read_text() == '{"text": "my own notes"}\n'
    err = one_line(apply(model, docs, out, "--fresh"))  # --fresh replaces cuvee's own files only
    assert "not written by cuvee" in err and out.read_text() == '{"text": "my own notes"}\n'
    foreign_marker = tmp_path / "other.jsonl.json"  # a .json that is not cuvee's marker does not make it cuvee's
    foreign_marker.write_text('{"kind": "something else"}')
    (tmp_path / "other.jsonl").write_text("x\n")
    assert "not written by cuvee" in one_line(apply(model, docs, tmp_path / "other.jsonl"))
    assert (tmp_path / "other.jsonl").read_text() == "x\n"


def test_apply_replaces_its_own_output_for_the_same_plan_or_with_fresh(model, docs, tmp_path):
    out = tmp_path / "kept.jsonl.gz"
    res = apply(model, docs, out, "--threshold", "0.5")
    assert res.exit_code == 0, res.output
    marker = json.loads((tmp_path / "kept.jsonl.gz.json").read_text())
    assert marker["kind"] == "classify-apply" and marker["complete"] and marker["summary"]["kept"] == 10
    first = out.read_bytes()
    assert apply(model, docs, out, "--threshold", "0.5").exit_code == 0  # same plan: rewritten, same documents
    import gzip

    assert gzip.decompress(out.read_bytes()) == gzip.decompress(first)
    err = one_line(apply(model, docs, out, "--threshold", "0.9"))
    assert "different plan" in err and "settings.threshold" in err and out.read_bytes() == first
    docs.write_text(docs.read_text() + json.dumps({"id": "new", "text": "committee report"}) + "\n")
    err = one_line(apply(model, docs, out, "--threshold", "0.5"))  # an input file changed: another plan
    assert "different plan" in err and "inputs" in err and out.read_bytes() == first
    res = apply(model, docs, out, "--threshold", "0.9", "--fresh")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "kept.jsonl.gz.json").read_text())["plan"]["settings"]["threshold"] == 0.9
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kept.jsonl.gz.cuvee.lock", "docs.jsonl", "kept.jsonl.gz",
                                                          "kept.jsonl.gz.json"]  # no temporary file left


def test_apply_output_in_use_or_among_inputs_is_refused(model, docs, tmp_path):
    from cuvee.kernel.workdir import FolderLock

    out = tmp_path / "kept.jsonl"
    held = FolderLock(tmp_path, lock_name=".kept.jsonl.cuvee.lock").acquire()
    try:
        err = one_line(apply(model, docs, out))
    finally:
        held.release()
    assert "another cuvee process" in err and not out.exists()
    before = docs.read_bytes()
    assert "is one of the input files" in one_line(apply(model, docs, docs))
    assert docs.read_bytes() == before


def test_apply_failure_leaves_the_old_output_whole(model, docs, tmp_path):
    """A failure while writing (a Parquet binary column JSON cannot hold) is one line; the old output and its
    marker stay as they were (it used to leave a cut file under the real name, and a traceback)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "kept.jsonl"
    assert apply(model, docs, out).exit_code == 0
    before, marker = out.read_bytes(), (tmp_path / "kept.jsonl.json").read_bytes()
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["committee report", "click here"],
                             "blob": pa.array([b"ok", b"\x00\x01"])}), bad)
    err = one_line(apply(model, bad, out, "--fresh"))
    assert "cannot be written as JSON" in err and "nothing was written" in err
    assert out.read_bytes() == before and (tmp_path / "kept.jsonl.json").read_bytes() == marker
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
