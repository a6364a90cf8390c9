"""`cuvee classify eval` refuses data it cannot measure, and `classify apply -o FILE` writes only what cuvee owns
(issue #25: folders.py contract, as annotate and train). Real fastText models trained on a few hundred lines."""

import json
import random

import pytest
from click.testing import CliRunner

from cuvee.classifiers.cli import classify

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
    res = CliRunner().invoke(classify, ["train", "--data", str(data), "-o", str(out), "--epoch", "2", "--dim", "16",
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
    return CliRunner().invoke(classify, ["eval", "-m", str(model), "--data", str(data), *extra])


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
