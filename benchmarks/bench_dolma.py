"""Per-document cost of dedup and C4 rules: cuvee's stages next to AI2's Dolma toolkit (Rust), same documents.

Corpus: 3,000 documents (``--docs``; 10,000, about the most the real passages give, resolves Dolma's small
per-document costs better) from real text: 150-300-word passages of WCXB dev pages' main content, each with 0-6
real boilerplate lines (WCXB "without" snippets, a pool of 300) inserted, plus 10 % exact copies of earlier
documents shuffled in, so exact and paragraph/line dedup both have real work. Written once as Dolma's layout
(``documents/*.jsonl.gz`` with id/text/source/added) and read by both tools. Above 10,000 further documents
join the first half of one real passage's lines to the second half of another's, which lifts the per-document
signal above this VM's process-to-process CPU noise; their lines repeat, so there only exact dedup, the C4 rules
and the one-pass line rule (Dolma's own) are compared.

Dolma runs as its users run it, from its own venv, one process: ``dolma dedupe`` (Bloom filter, documents by
``$.text``; paragraphs), ``dolma tag --taggers c4_v2``. cuvee runs ``cuvee run`` on a recipe with one stage
(``exact_dedup`` and ``line_dedup``, each as the default barrier and with ``one_pass: true``, ``c4_quality``),
tasks=1, workers=1; both variants of a dedup stage are compared with the same Dolma runs.

Each (tool, operation, corpus) is a fresh process; CPU = user + system of the child (getrusage). Runs are
interleaved round-robin, ``--runs`` times; medians reported with [min-max]. Start-up is set apart by also
running every command on a 30-document corpus: per-document cost = (CPU(N) - CPU(30)) / (N - 30). For
cuvee the stage's cost is *marginal*: a baseline recipe that reads the same input and writes exactly the stage's
output (the benchmark-only ``bench_keep_ids`` stage of ``_keep_ids.py`` keeps the documents the stage kept, with
the texts it wrote, about 1 us a document, which this credits to the stage) is subtracted, so reading and writing, which Dolma's dedupe also does (documents in,
attribute files out), are not charged to cuvee's stage, and neither is the writing a stage saves by dropping or
shortening documents. (Until 2026-11-26 the baseline read the stage's output instead of its input, which charged
a stage for reading every document it dropped: slight at 10 % drops, most of the figure where a stage drops 80 %.)
The stage's figure still includes re-reading the input (copy-free dedup reads it twice), its whole-corpus phase
jobs, the filter and its intermediate files. The whole run's cost is printed too. What each removes is printed next to it: the rules differ (Dolma drops every repeat after the first paragraph; cuvee's default line dedup removes
every copy of a line seen in >= k documents of a bucket, ccNet / Llama 3; its ``one_pass`` with k = 2 is Dolma's
rule on ccNet-normalised lines), so decisions are compared, not assumed.

    python -m venv /tmp/dolma-venv && /tmp/dolma-venv/bin/pip install dolma
    python benchmarks/bench_dolma.py --dolma /tmp/dolma-venv/bin/dolma --runs 3 --docs 10000
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from _child import run_child  # noqa: E402

CUVEE_STAGES = {
    "exact": {"stage": "exact_dedup"},
    "exact one_pass": {"stage": "exact_dedup", "one_pass": True},
    "paragraph/line": {"stage": "line_dedup", "bucket_size": 1_000_000, "min_occurrences": 2, "min_words": 0},
    # Dolma's own rule (a repeat is removed, its first copy stays), decided while reading
    "line one_pass": {"stage": "line_dedup", "one_pass": True, "bucket_size": 1_000_000, "min_occurrences": 2,
                      "count_per_document": False, "min_words": 0},
    "c4 rules": {"stage": "c4_quality"},
}


def build_corpus(folder: Path, n: int, seed: int = 0) -> dict:
    from benchmarks._neardup_eval import boilerplate_pool, passages, real_page_texts

    rng = random.Random(seed)
    pool = rng.sample(boilerplate_pool(), 300)
    base = [p for t in real_page_texts() for p in passages(t, rng)]
    n_orig = n - n // 10
    real = len(base)
    for _ in range(real, n_orig):  # past the real passages: the first half of one's lines, the second half of another's
        a, b = (base[rng.randrange(real)].split("\n") for _ in range(2))
        base.append("\n".join(a[:len(a) // 2] + b[len(b) // 2:]))
    docs, inserted = [], 0
    for i, text in enumerate(base[:n_orig]):
        lines = text.split("\n")
        for _ in range(rng.randint(0, 6)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(pool))
            inserted += 1
        docs.append("\n".join(lines))
    copies = [rng.choice(docs) for _ in range(n - n_orig)]
    for c in copies:
        docs.insert(rng.randrange(len(docs) + 1), c)
    (folder / "documents").mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "documents" / "part-0000.jsonl.gz", "wt") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": f"d{i}", "text": text, "source": "bench", "added": "2026-01-01T00:00:00.000Z",
                                "created": "2026-01-01T00:00:00.000Z", "metadata": {}}) + "\n")
    return {"documents": len(docs), "exact_copies": n - n_orig, "boilerplate_lines": inserted,
            "chars": sum(len(d) for d in docs)}


def docs_runs_args(description: str, docs: int, runs: int) -> argparse.Namespace:
    """``--docs`` and ``--runs``, the options of the in-process benchmarks built on :func:`build_corpus`."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=docs)
    ap.add_argument("--runs", type=int, default=runs)
    return ap.parse_args()


REAL_PASSAGES = 10_000  # about what the real pages give; beyond, build_corpus joins halves of two passages

# the Dolma command each cuvee operation is compared with (one Dolma run per command and round)
DOLMA_OP = {"exact": "exact", "exact one_pass": "exact", "paragraph/line": "paragraph/line",
            "line one_pass": "paragraph/line", "c4 rules": "c4 rules"}
LINE_OPS = ("paragraph/line", "line one_pass")


def _child_cpu(cmd: list[str], cwd: Path | None = None) -> float:
    return run_child(cmd, cwd=cwd).cpu_s


# ------------------------------------------------------------------------------------------ cuvee
def _slug(op: str | None) -> str:
    return (op or "baseline").replace("/", "_").replace(" ", "_")


def cuvee_run(docs: Path, op: str | None, work: Path, kept_ids: Path | None = None) -> tuple[float, dict]:
    """``cuvee run`` of read JSONL (folder ``docs``) -> [stage] -> write JSONL, in a fresh interpreter; CPU s and
    the funnel. ``kept_ids``: with an op, write the documents it kept there (id, text); without one, the run keeps
    only those, with those texts (the op's baseline: the same input read, the same output written, no stage work)."""
    run_dir = work / f"cuvee_{_slug(op)}"
    shutil.rmtree(run_dir, ignore_errors=True)
    stages = [CUVEE_STAGES[op]] if op else [{"stage": "bench_keep_ids", "ids_file": str(kept_ids)}] if kept_ids else []
    recipe = {"name": "bench_dolma", "run_dir": str(run_dir),
              "input": {"paths": [str(docs)], "format": "jsonl"}, "stages": stages,
              "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 1, "workers": 1}}
    rf = work / "recipe.json"
    rf.write_text(json.dumps(recipe))
    code = ("import json,sys; import benchmarks._keep_ids; from cuvee.pipeline.runner import run_recipe; "
            f"run_recipe(json.load(open({str(rf)!r})))")
    cpu = _child_cpu([sys.executable, "-c", code], cwd=REPO)
    stats = json.loads((run_dir / "stats.json").read_text())
    st = [s for s in stats["stages"] if s["name"] not in ("reader",)]
    info = {"kept": stats["accounting"]["kept"], "dropped": dict(stats["accounting"]["by_reason"])}
    if op in LINE_OPS:
        c = next(s for s in st if s["name"] == "line_dedup")["counters"]
        info["lines_removed"] = c.get("lines_removed", 0)
    if op and kept_ids is not None:
        from _keep_ids import write_kept

        write_kept(kept_ids, (json.loads(line) for f in sorted((run_dir / "output").rglob("*.jsonl*"))
                              for line in (gzip.open(f, "rt") if f.suffix == ".gz" else open(f))))
    return cpu, info


# ------------------------------------------------------------------------------------------ Dolma
def dolma_run(dolma: str, corpus: Path, op: str, work: Path) -> tuple[float, dict]:
    """Dolma on a private copy of the corpus (it skips outputs that exist, so every run starts clean)."""
    root = work / f"dolma_{op.replace('/', '_').replace(' ', '_')}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(corpus / "documents", root / "documents")
    docs = str(root / "documents" / "*.jsonl.gz")
    bloom = ["--bloom_filter.file", str(root / "bloom.bin"), "--no-bloom_filter.read_only",
             "--bloom_filter.estimated_doc_count", "1000000", "--bloom_filter.desired_false_positive_rate", "0.0001"]
    if op == "exact":
        cmd = [dolma, "dedupe", "--documents", docs, "--dedupe.name", "exact", "--dedupe.documents.key", "$.text",
               "--dedupe.documents.attribute_name", "bff_duplicate_doc", *bloom, "--processes", "1"]
    elif op == "paragraph/line":
        cmd = [dolma, "dedupe", "--documents", docs, "--dedupe.name", "para",
               "--dedupe.paragraphs.attribute_name", "bff_duplicate_paragraph_spans", *bloom, "--processes", "1"]
    else:
        cmd = [dolma, "tag", "--documents", docs, "--experiment", "bench", "--taggers", "c4_v2", "--processes", "1"]
    cpu = _child_cpu(cmd, cwd=root)
    spans, docs_flagged, attrs = 0, 0, {}
    for f in (root / "attributes").rglob("*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                row = json.loads(line)
                flagged = False
                for k, v in row.get("attributes", {}).items():
                    n = len(v) if isinstance(v, list) else 0
                    attrs[k.rsplit("__", 1)[-1]] = attrs.get(k.rsplit("__", 1)[-1], 0) + n
                    spans += n
                    flagged |= n > 0
                docs_flagged += flagged
    return cpu, {"docs_with_spans": docs_flagged, "spans": spans, "by_attribute": attrs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dolma", default="/tmp/dolma-venv/bin/dolma")
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--tiny", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ops", default="exact,exact one_pass,paragraph/line,line one_pass,c4 rules")
    args = ap.parse_args()
    if not Path(args.dolma).exists():
        sys.exit(f"no {args.dolma}: python -m venv /tmp/dolma-venv && /tmp/dolma-venv/bin/pip install dolma")
    work = Path(tempfile.mkdtemp(prefix="cuvee_bench_dolma_"))
    big, tiny = work / "big", work / "tiny"
    info = build_corpus(big, args.docs)
    build_corpus(tiny, args.tiny, seed=1)
    ops = args.ops.split(",")
    if args.docs > REAL_PASSAGES and "paragraph/line" in ops:
        # the joined halves repeat real lines, so nearly every line reaches k = 2 and the barrier's rule (remove
        # every copy) empties the documents; "line one_pass" applies Dolma's own rule (the first copy stays), so
        # both tools still do the same work there
        sys.exit(f"--docs above {REAL_PASSAGES:,} joins halves of real passages: their lines repeat, so the "
                 "barrier's paragraph/line rule would empty the documents; use 'line one_pass', exact or c4 there")
    version = subprocess.run([str(Path(args.dolma).parent / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('dolma'))"], capture_output=True,
                             text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} dolma {version}; corpus {info}; runs={args.runs}; "
          f"load {open('/proc/loadavg').read().split()[:3]}")
    cpu: dict[tuple, list[float]] = {}
    decisions: dict[tuple, dict] = {}
    for r in range(args.runs):
        for corpus_name, corpus in (("big", big), ("tiny", tiny)):
            c, i = cuvee_run(corpus / "documents", None, work)
            cpu.setdefault(("cuvee", "baseline", corpus_name), []).append(c)
            for op in ops:
                kept = work / f"kept_{_slug(op)}_{corpus_name}.json"
                c, i = cuvee_run(corpus / "documents", op, work, kept_ids=kept)
                cpu.setdefault(("cuvee", op, corpus_name), []).append(c)
                decisions[("cuvee", op, corpus_name)] = i
                # the op's baseline: the same input read, the documents the op kept written, nothing else
                c, _ = cuvee_run(corpus / "documents", None, work, kept_ids=kept)
                cpu.setdefault(("cuvee", "baseline " + op, corpus_name), []).append(c)
                dop = DOLMA_OP[op]
                if len(cpu.get(("dolma", dop, corpus_name), [])) <= r:
                    c, i = dolma_run(args.dolma, corpus, dop, work)
                    cpu.setdefault(("dolma", dop, corpus_name), []).append(c)
                    decisions[("dolma", dop, corpus_name)] = i
        print(f"  run {r + 1} done: " + ", ".join(f"{k[0]}/{k[1]}/{k[2]} {v[-1]:.2f}s" for k, v in cpu.items()), flush=True)
    n = info["documents"] - args.tiny
    med = {k: statistics.median(v) for k, v in cpu.items()}

    def per_k(tool, op, i=None):
        """CPU s per 1,000 documents, start-up excluded; i: one run's value instead of the median."""
        pick = (lambda k: cpu[k][i]) if i is not None else (lambda k: med[k])
        if tool == "cuvee":
            m_big = pick(("cuvee", op, "big")) - pick(("cuvee", "baseline " + op, "big"))
            m_tiny = pick(("cuvee", op, "tiny")) - pick(("cuvee", "baseline " + op, "tiny"))
            return (m_big - m_tiny) / n * 1000
        return (pick(("dolma", DOLMA_OP[op], "big")) - pick(("dolma", DOLMA_OP[op], "tiny"))) / n * 1000

    print("\n| operation | tool | CPU s per 1k docs, start-up excluded: median of runs [min-max] | start-up CPU s | what it removes |")
    print("|---|---|---|---|---|")
    shown = set()
    for op in ops:
        for tool in ("dolma", "cuvee"):
            if tool == "dolma":
                if DOLMA_OP[op] in shown:
                    continue  # one Dolma row per Dolma command
                shown.add(DOLMA_OP[op])
            runs = [per_k(tool, op, i) for i in range(args.runs)]
            key = op if tool == "cuvee" else DOLMA_OP[op]
            start = (med[(tool, key, "tiny")] - (med[("cuvee", "baseline " + op, "tiny")] if tool == "cuvee" else 0))
            d = decisions[(tool, key, "big")]
            if tool == "cuvee":
                what = f"kept {d['kept']}, dropped {d['dropped']}" + (f", lines removed {d['lines_removed']}" if "lines_removed" in d else "")
            else:
                what = f"{d['docs_with_spans']} docs with spans, {d['by_attribute']}"
            print(f"| {op} | {tool} | {statistics.median(runs):.3f} [{min(runs):.3f}-{max(runs):.3f}] | {start:.2f} | {what} |")
    print(f"\ncuvee read JSONL -> write JSONL of the input (not charged to the stages): "
          f"{(med[('cuvee', 'baseline', 'big')] - med[('cuvee', 'baseline', 'tiny')]) / n * 1000:.3f} s per 1k docs; "
          f"start-up {med[('cuvee', 'baseline', 'tiny')]:.2f} s")
    print("cuvee whole run (read, stage, write) per 1k docs, start-up excluded: " + ", ".join(
        f"{op} {(med[('cuvee', op, 'big')] - med[('cuvee', op, 'tiny')]) / n * 1000:.3f}" for op in ops))
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
