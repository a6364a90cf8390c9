"""Semantic dedup (embed + semantic_dedup, SemDeDup) against human-judged paraphrase pairs, alone and after the
FineWeb MinHash stage, with the cost per document (issue #35).

Data: the Microsoft Research Paraphrase Corpus (MRPC, Dolan & Brockett 2005): sentence pairs from news clusters,
each judged by two or three people as paraphrase (1) or not (0). Not bundled (Microsoft's own licence, see
benchmarks/data/mrpc/SOURCE.txt): give the folder holding ``msr_paraphrase_dev.txt`` and ``msr_paraphrase_test.txt``.

Each split is a corpus of its distinct sentences (one document each, id = MRPC's sentence id) run through the real
recipe stages (``cuvee.pipeline.runner.run_recipe``, one task, one torch thread). A judged pair counts as
collapsed when both sentences end with the same keeper (kept: itself; dropped: the ``<kind>_duplicate_of`` of its
exclusion record; MinHash then semantic: the semantic keeper of the MinHash keeper). Precision and recall are over
the judged pairs; documents merged with a sentence of another pair are counted apart (unjudged).

Thresholds are fixed on the dev split (400 pairs): the cosine of best F1, and the lowest cosine whose precision
is >= 0.90 (a dedup operating point); both are then reported on the test split (1,725 pairs), never tuned there.
The dev sweep reuses one embed run's vectors and the stage's own modules (k-means plan and fit, ``semdedup.decide``)
for each threshold; the reported test figures are whole recipe runs at the fixed thresholds.

Cost: CPU seconds of the whole in-process run (``getrusage``), median [min-max] over ``--runs`` runs; a stage's
cost is its run minus the run without it, per document; the embed stage also reports its own encoder CPU.

    python benchmarks/bench_semdedup.py --mrpc /path/to/mrpc --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from cuvee.pipeline.io import iter_documents
from cuvee.pipeline.runner import run_recipe

THREADS = 1


def read_mrpc(path: Path) -> tuple[dict[str, str], list[tuple[str, str, int]]]:
    """(sentence by id, judged pairs (id1, id2, label)) of one MRPC file."""
    sentences, pairs = {}, []
    with open(path, encoding="utf-8-sig") as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                continue
            label, a, b, sa, sb = parts
            sentences[a], sentences[b] = sa, sb
            pairs.append((a, b, int(label)))
    return sentences, pairs


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(work: Path, sentences: dict[str, str], stages: list[dict]) -> tuple[dict[str, str], float, dict]:
    """One recipe run; (keeper of every sentence, CPU seconds, stats)."""
    shutil.rmtree(work, ignore_errors=True)
    src = work / "in"
    src.mkdir(parents=True)
    (src / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in sentences.items()))
    c = cpu_s()
    stats = run_recipe({"name": "semdedup", "run_dir": str(work / "run"), "input": {"paths": [str(src)],
                        "format": "jsonl"}, "stages": stages, "executor": {"kind": "local", "tasks": 1, "workers": 1},
                        "output": {"format": "jsonl", "exclusions": True}})
    cost = cpu_s() - c
    assert stats["accounting"]["balanced"]
    keeper = {d.id: d.id for d in iter_documents(stats["output"]["files"])}
    hops = {}
    for p in sorted((work / "run" / "excluded").rglob("*.jsonl.gz")):
        for line in gzip.open(p, "rt"):
            rec = json.loads(line)
            m = rec["metadata"]
            hops[rec["id"]] = m.get("semantic_duplicate_of") or m.get("minhash_duplicate_of")
    for i in hops:  # follow MinHash's keeper to the semantic keeper when it was dropped later
        k = hops[i]
        while k in hops:
            k = hops[k]
        keeper[i] = k
    assert len(keeper) == len(sentences)
    return keeper, cost, stats


def score(keeper: dict[str, str], pairs: list[tuple[str, str, int]]) -> dict:
    together = [keeper[a] == keeper[b] for a, b, _ in pairs]
    tp = sum(t and y for t, (_, _, y) in zip(together, pairs))
    fp = sum(t and not y for t, (_, _, y) in zip(together, pairs))
    pos = sum(y for _, _, y in pairs)
    partner = {}
    for a, b, _ in pairs:
        partner.setdefault(a, set()).add(b)
        partner.setdefault(b, set()).add(a)
    cross = sum(1 for i, k in keeper.items() if k != i and k not in partner.get(i, ()))
    p = tp / (tp + fp) if tp + fp else float("nan")
    r = tp / pos if pos else float("nan")
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "collapsed": tp + fp,
            "dropped": sum(k != i for i, k in keeper.items()), "merged_outside_pair": cross}


def sweep(store: Path, ids: list[str], pairs, thresholds: list[float]) -> list[tuple[float, dict]]:
    """Every threshold on one embed run's vectors, through the stage's own k-means plan, fit and decision."""
    from cuvee.dedup import kmeans, semdedup
    from cuvee.dedup.embed_store import EmbedStore, gather, id_hash
    from cuvee.dedup.semantic_dedup import SemanticDedupParams

    p = SemanticDedupParams()
    es = EmbedStore(store)
    x = gather(es.vectors(0), np.arange(len(ids)))
    h = np.array([id_hash(i) for i in ids], dtype=np.uint64)
    k, m = kmeans.plan(len(ids), p.clusters, p.docs_per_cluster, p.fit_fraction, p.max_fit_documents)
    sample = np.flatnonzero(h <= kmeans.sample_cut(h, m))
    centroids = kmeans.fit(x[sample[np.argsort(h[sample], kind="stable")]], k, p.seed, p.iterations)
    labels, sims = kmeans.assign(x, centroids)
    lengths = np.zeros(len(ids))  # farthest-first: lengths unused
    out = []
    for t in thresholds:
        keeper = {}
        for c in np.unique(labels):
            mem = np.flatnonzero(labels == c)
            mem = mem[semdedup.keep_order(p.keep, sims[mem], lengths[mem], [h[mem], mem])]
            root, _ = semdedup.decide(x[mem], t, 2**28)
            keeper |= {ids[j]: ids[mem[r]] for j, r in zip(mem, root)}
        out.append((t, score(keeper, pairs)))
    return out


def spread(v: list[float]) -> str:
    return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mrpc", type=Path, required=True, help="folder with msr_paraphrase_dev.txt and _test.txt")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    from datatrove.utils.logging import logger

    logger.remove()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_semdedup_"))
    embed = {"stage": "embed", "threads": THREADS}

    dev_s, dev_p = read_mrpc(args.mrpc / "msr_paraphrase_dev.txt")
    _, _, stats = run(work / "dev", dev_s, [embed])
    grid = [round(t, 3) for t in np.arange(0.60, 0.991, 0.01)]
    dev = sweep(Path(stats["embeddings"][0]["store"]), list(dev_s), dev_p, grid)
    best_f1 = max(dev, key=lambda r: (r[1]["f1"], r[0]))
    precise = min((r for r in dev if r[1]["precision"] >= 0.90), key=lambda r: r[0], default=dev[-1])
    print(f"dev: {len(dev_p)} pairs ({sum(y for *_, y in dev_p)} paraphrases), {len(dev_s)} sentences")
    for t, s in dev:
        print(f"  dev t={t:.2f} P={s['precision']:.3f} R={s['recall']:.3f} F1={s['f1']:.3f}")
    print(f"fixed on dev: best F1 at {best_f1[0]:.2f}, precision >= 0.90 from {precise[0]:.2f}")

    test_s, test_p = read_mrpc(args.mrpc / "msr_paraphrase_test.txt")
    n = len(test_s)
    print(f"test: {len(test_p)} pairs ({sum(y for *_, y in test_p)} paraphrases), {n} sentences")
    configs = {"read+write only": [], "embed only": [embed], "minhash": [{"stage": "minhash_dedup"}]}
    for name, t in (("best-F1", best_f1[0]), ("P>=0.90", precise[0])):
        configs[f"semantic {name} t={t:.2f}"] = [embed, {"stage": "semantic_dedup", "threshold": t}]
        configs[f"minhash + semantic {name} t={t:.2f}"] = [embed, {"stage": "minhash_dedup"},
                                                           {"stage": "semantic_dedup", "threshold": t}]
    costs: dict[str, list[float]] = {}
    encoder_ms: list[float] = []
    timed = [name for name in configs if "best-F1" not in name]  # best-F1 runs cost as the others: scored only
    for i in range(args.runs):
        for name, stages in configs.items():
            if i and name not in timed:
                continue
            keeper, cost, stats = run(work / "test", test_s, stages)
            costs.setdefault(name, []).append(cost)
            if stats.get("embeddings"):
                e = stats["embeddings"][0]
                encoder_ms.append(1000 * e["cpu_s"] / e["documents"])
            if i == 0 and name not in ("read+write only", "embed only"):
                s = score(keeper, test_p)
                print(f"  test {name}: P={s['precision']:.3f} R={s['recall']:.3f} F1={s['f1']:.3f} collapsed "
                      f"pairs={s['collapsed']} dropped={s['dropped']} merged outside their pair={s['merged_outside_pair']}")
        report_costs({k: v for k, v in costs.items() if k in timed}, encoder_ms, n, i + 1)


def report_costs(costs: dict[str, list[float]], encoder_ms: list[float], n: int, runs: int) -> None:
    """Printed after every round, so a cut-short run keeps its figures."""
    base = costs["read+write only"]
    print(f"cost after {runs} run(s), CPU ms/doc over {n} documents, median [min-max]:", flush=True)
    for name, v in costs.items():
        print(f"  {name}: run {spread([1000 * c / n for c in v])} ms/doc; over read+write "
              f"{spread([1000 * (c - b) / n for c, b in zip(v, base)])}")
    emb = costs["embed only"]
    for name, v in costs.items():
        if name.startswith("semantic"):
            print(f"  semantic_dedup alone ({name}): {spread([1000 * (c - e) / n for c, e in zip(v, emb)])} ms/doc")
    print(f"  embed stage's own encoder CPU: {spread(encoder_ms)} ms/doc (model load excluded)", flush=True)


if __name__ == "__main__":
    main()
