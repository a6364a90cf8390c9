"""benchmarks/bench_quality_labels.py on a tiny HPLT-format file written here (the real label sets are not shipped):
the table has every member, both ensembles and the length floor; each AUC is the AUC of the scores the real
scorers gave; the ensemble column is the quality_ensemble stage's rule; bad input is one line and exit 2."""

import csv
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import percentileofscore

from cuvee.classifiers.metrics import roc_auc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_quality_labels as bench

PROSE = [
    "The river rises in the northern hills and flows slowly through farmland before it reaches the sea.",
    "Researchers measured the temperature of the lake every morning for three years to follow the seasons.",
    "Her grandmother taught her to bake bread, and the recipe has been passed down for generations.",
    "The committee met on Tuesday to discuss the budget and agreed to fund the new library wing.",
    "Volcanic soil is rich in minerals, which is why vineyards often grow on the slopes of old volcanoes.",
    "After the storm, volunteers cleared the roads and helped families repair their damaged roofs.",
    "The museum's new exhibition explains how early maps were drawn and why many of them were wrong.",
    "When the train was delayed, passengers shared stories and the journey felt shorter than expected.",
]
JUNK = [
    "cheap shoes, buy shoes online, shoes sale, best shoes, discount shoes, shoes free shipping, shoes 2024",
    "Home | About | Contact | Login | Register | Cart (0) | Privacy Policy | Terms | Sitemap | FAQ",
    "casino bonus casino free spins casino online casino win casino jackpot casino slots casino",
    "Click here >> Download now >> free mp3 >> free movies >> hd 1080p >> full version >> crack",
]
HEADER = ["porn?\nempty/1", "unnatural?\nempty/1", "lang correct?\n0/1", "text_show", "id"]


def write_hplt(path: Path, n_good: int = 24, n_bad: int = 12, n_uninspected: int = 3, flip: bool = False) -> Path:
    rng = random.Random(0)
    rows = []
    for i in range(n_good):
        rows.append(("", "1" if flip else "", "1", " ".join(rng.sample(PROSE, 4)), f"g{i}"))
    for i in range(n_bad):
        rows.append(("", "" if flip else "1", "1", " ".join(rng.choice(JUNK) for _ in range(3)), f"b{i}"))
    for i in range(n_uninspected):
        rows.append(("", "", "", rng.choice(PROSE), f"u{i}"))
    rng.shuffle(rows)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(HEADER)
        w.writerows(rows)
    return path


def run_bench(tmp_path: Path, tsv: Path, name: str = "out.json") -> dict:
    out = tmp_path / name
    rc = bench.main(["--hplt", str(tsv), "--folds", "2", "--boot", "200", "--skip-minilm", "--json", str(out)])
    assert rc == 0
    (res,) = json.loads(out.read_text())["results"]
    return res


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qlab")
    tsv = write_hplt(tmp / "batch0.tsv")
    return run_bench(tmp, tsv) | {"tsv": str(tsv)}


def by_name(res: dict) -> dict:
    return {r["name"]: r for r in res["rows"]}


def test_table_has_members_ensembles_and_floor_and_counts_every_row(result, capsys):
    rows = by_name(result)
    assert {"member: demo_fasttext", "member: language", "member: fasttext_xfit", "member: dclm_standin",
            "member: perplexity"} <= set(rows)
    ens = {(r["subset"], r["combine"], r["buckets"]): r["members"] for r in result["rows"] if r["kind"] == "ensemble"}
    # minilm skipped here, so no "trained" pair; perplexity under the shipped reference LM by default
    every = ["demo_fasttext", "language", "dclm_standin", "fasttext_xfit", "perplexity"]
    assert ens == {("all", "max", 20): every, ("all", "max", 10000): every, ("all", "mean", 20): every,
                   ("all", "mean", 10000): every, ("shipped", "max", 20): every[:2], ("shipped", "mean", 20): every[:2]}
    assert "floor: document length (chars)" in rows
    assert result["counts"] == {"rows": 39, "kept_positive": 24, "kept_negative": 12, "not_inspected": 3}
    assert (result["n"], result["positives"], result["negatives"]) == (36, 24, 12)
    # each ensemble is judged against the best of its own members
    auc = {r["name"]: r["auc"] for r in result["rows"]}
    assert len(result["verdicts"]) == 6
    for v, r in zip(result["verdicts"], [r for r in result["rows"] if r["kind"] == "ensemble"]):
        assert v["best_member"] == max((f"member: {m}" for m in r["members"]), key=auc.get)
        assert v["auc_diff"] == pytest.approx(auc[v["ensemble"]] - auc[v["best_member"]], abs=2e-4)


def test_each_auc_is_the_auc_of_the_real_scorers_scores(result):
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

    y = np.array(result["labels"])
    for r in result["rows"]:
        assert len(r["scores"]) == result["n"]
        sign = -1 if r["name"] == "member: perplexity" else 1  # bits per byte: lower is better
        assert r["auc"] == pytest.approx(roc_auc(y, sign * np.array(r["scores"])), abs=1e-4)
        assert r["ci95"][0] <= r["ci95"][1]
    # the demo member is the shipped model's output on the inspected documents, in file order
    texts = bench.load_hplt(result["tsv"]).texts
    demo = by_name(result)["member: demo_fasttext"]
    assert demo["scores"] == pytest.approx(FastTextScorer(DEMO_FASTTEXT).score_batch(texts).tolist())
    assert by_name(result)["floor: document length (chars)"]["scores"] == [len(t) for t in texts]
    # what "no signal" looks like: the same scores against permuted labels average ~0.5
    assert abs(result["control_permuted_labels"]["mean_auc"] - 0.5) < 0.05


def test_flipping_the_human_labels_flips_the_untrained_members(tmp_path, result):
    flipped = run_bench(tmp_path, write_hplt(tmp_path / "flipped.tsv", flip=True))
    assert flipped["counts"]["kept_positive"] == 12 and flipped["counts"]["kept_negative"] == 24
    a, b = by_name(result), by_name(flipped)
    for name in ("member: demo_fasttext", "member: language", "floor: document length (chars)"):
        assert b[name]["scores"] == a[name]["scores"]  # same documents, same scorer: same scores
        assert b[name]["auc"] == pytest.approx(1 - a[name]["auc"], abs=1e-3)


def test_ensemble_column_is_the_stage_rule(result):
    """Percentile rank (#< + #<=)/2N per member, combined by max / mean, floor(buckets * combined)."""
    rows = by_name(result)
    for r in (r for r in result["rows"] if r["kind"] == "ensemble"):
        members = [np.array(rows[f"member: {m}"]["scores"]) * (-1 if m == "perplexity" else 1) for m in r["members"]]
        pct = np.array([[percentileofscore(m, v, kind="mean") / 100 for v in m] for m in members])
        combined = pct.max(axis=0) if r["combine"] == "max" else pct.mean(axis=0)
        assert r["scores"] == [min(r["buckets"] - 1, math.floor(r["buckets"] * c + 1e-9)) for c in combined]


def test_the_viewers_line_between_two_halves_is_not_document_text(tmp_path):
    path = write_hplt(tmp_path / "halves.tsv", n_good=2, n_bad=0, n_uninspected=0)
    halves = "First half of a page about rivers.\n..........\nSecond half, three paragraphs later."
    with open(path, "a", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t").writerow(["", "", "1", halves, "h"])
    texts = bench.load_hplt(path).texts
    assert texts[-1] == "First half of a page about rivers.\nSecond half, three paragraphs later."


def test_ellipse_label_rule_and_counted_skips(tmp_path):
    path = tmp_path / "ellipse.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, ["text_id_kaggle", "full_text", "Overall"])
        w.writeheader()
        for i, (text, score) in enumerate([("a b c", "3.0"), ("d e f", "3.5"), ("g", "5.0"), ("h", "1.0"), ("i", "n/a"),
                                           ("", "4.0"), ("j", "9")]):
            w.writerow({"text_id_kaggle": i, "full_text": text, "Overall": score})
    ls = bench.load_ellipse(path)
    assert ls.labels.tolist() == [False, True, True, False]
    assert ls.counts == {"rows": 7, "kept_positive": 2, "kept_negative": 2, "bad_score": 2, "empty_text": 1}


@pytest.mark.parametrize("case", ["missing_columns", "no_file", "too_few_bad", "no_input", "ellipse_columns"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    if case == "missing_columns":
        (tmp_path / "x.tsv").write_text("text\tid\nhello\t1\n", encoding="utf-8")
        argv = ["--hplt", str(tmp_path / "x.tsv")]
    elif case == "no_file":
        argv = ["--hplt", str(tmp_path / "nope.tsv")]
    elif case == "too_few_bad":
        argv = ["--hplt", str(write_hplt(tmp_path / "few.tsv", n_good=10, n_bad=2, n_uninspected=0)), "--folds", "5"]
    elif case == "no_input":
        argv = []
    else:
        (tmp_path / "e.csv").write_text("full_text,score\nhello,3\n", encoding="utf-8")
        argv = ["--ellipse", str(tmp_path / "e.csv")]
    assert bench.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
