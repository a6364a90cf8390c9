"""Calibration of ``cuvee anneal`` verdicts on CPU: are its "better/worse" calls right as often as it says?

    python benchmarks/calibrate_anneal.py --reps 10 --seeds 3 --tokens 32768 --work runs/calibrate_anneal

Two experiments, both through the public entry point ``cuvee.train.anneal.run_anneal`` (paired seeds, the
verdict of :mod:`cuvee.train.verdict`, eval decontamination of :mod:`cuvee.train.decontam`):

* NULL: candidate and control identical in distribution. The anneal half of the WCXB training pages
  (data/curated, human-reviewed main content) is split by a seeded hash of the page id into two disjoint
  halves A and B, a fresh split per repetition; candidate = 30 % A + 70 % default, control = 30 % B + 70 %
  default. Every "candidate better" / "control better" is a false positive; target <= 10 % (nominal 5 %).
* POWER: candidate = documents the pipeline KEPT, control = documents it DROPPED (or the other way round:
  the roles alternate between repetitions so a bias towards either arm cannot pass as power), each 30 % +
  70 % of the same default pool. Kept/dropped come from ``cuvee run recipes/demo.yaml`` on the bundled
  Common Crawl sample (data/sample) with ``output: {exclusions: true}``: kept = ``<run>/output``, dropped =
  every ``<run>/excluded/<stage>`` with text (stages before extraction drop records without text). A
  repetition is right when the verdict says the KEPT arm is better; target >= 9 of 10.

Shared by all repetitions (built once, cached under ``--work``): byte-level shards (cuvee/train/demo_data.py),
a base model = configs/train/tiny.yaml trained on the default pool (WCXB base half, main content) and stopped
at step 200 of 300 (inside the WSD stable phase, as configs/train/anneal_demo.yaml), the pipeline run.

Pairing by construction: every training document is cut into chunks of exactly ``--chunk`` bytes (+ EOS), and
both arms of a repetition hold the same number of chunks with the same default chunks at the same positions;
only the 30 % slot positions differ (A vs B, kept vs dropped). With order ``window`` and the window set to the
arm's whole length, one seed reads the same positions in both arms, so the 70 % default part is read token for
token identically by candidate and control, and each seed reads a different random subset of the slot chunks.
Null arms hold 3,000 slot chunks per half (``--null-chunks``; ~8 % of them are read per seed at 32k tokens), so
the seed noise includes which documents were drawn and a fixed pool barely differs between A and B; power arms
hold all 200 chunks the kept set yields (~19 % read per seed): the verdict is then about that fixed set, which is
what a real ablation asks. ``--null-chunks 200`` gives the null the same fixed small pool (a harder null: the
200-chunk pools of A and B differ a little, and seeds only partly resample them).

Eval: the WCXB held-out pages (split by file id, never trained on), first ``--eval-docs`` documents, each
truncated to 4,000 bytes; bits per byte. Results per repetition are cached in ``<work>/results/`` (a rerun
with the same settings skips finished repetitions; ``--fresh`` recomputes them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import xxhash
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cuvee.train.demo_data import load_wcxb, split_heldout, write_shards

MAX_DOC_BYTES = 4000
SLOT_SHARE = 0.3
BASE_STEPS, BASE_STOP = 300, 200


# ---- data ---------------------------------------------------------------------------------------------
def _bytes(text: str) -> bytes:
    return text.encode("utf-8")[:MAX_DOC_BYTES]


def chunks(texts: list[str], size: int) -> list[np.ndarray]:
    """Every text (truncated to 4,000 bytes) cut into chunks of exactly ``size`` bytes; the short tail is dropped."""
    out = []
    for t in texts:
        b = np.frombuffer(_bytes(t), dtype=np.uint8).astype(np.uint16)
        out += [b[i:i + size] for i in range(0, len(b) - size + 1, size)]
    return out


def _read_jsonl_gz(paths) -> list[dict]:
    rows = []
    for p in sorted(paths):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def run_pipeline(work: Path) -> dict:
    """``cuvee run`` of recipes/demo.yaml with exclusions on, into <work>/pipeline (once)."""
    run_dir = work / "pipeline"
    if not (run_dir / "stats.json").exists():
        recipe = yaml.safe_load((REPO / "recipes/demo.yaml").read_text())
        recipe["name"] = "calibration_demo"
        recipe["input"]["paths"] = [str(REPO / p) for p in recipe["input"]["paths"]]
        recipe["output"] = {**recipe.get("output", {}), "format": "jsonl", "exclusions": True}
        work.mkdir(parents=True, exist_ok=True)
        (work / "demo_exclusions.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
        t0 = time.perf_counter()
        subprocess.run(["cuvee", "run", str(work / "demo_exclusions.yaml"), "--run-dir", str(run_dir), "--fresh"],
                       check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        print(f"[calibrate] pipeline run: {time.perf_counter() - t0:.1f} s", flush=True)
    kept = [r["text"] for r in _read_jsonl_gz((run_dir / "output").glob("*.jsonl.gz")) if (r.get("text") or "").strip()]
    dropped, per_stage = [], {}
    for stage in sorted((run_dir / "excluded").iterdir()):
        rows = _read_jsonl_gz(stage.glob("*.jsonl.gz"))
        texts = [r["text"] for r in rows if (r.get("text") or "").strip()]
        per_stage[stage.name] = {"documents": len(rows), "with_text": len(texts)}
        dropped += texts
    return {"kept": kept, "dropped": dropped, "per_stage": per_stage}


def prepare(work: Path, chunk: int, shards_only: bool = False) -> dict | None:
    """Shared data: default pool, base shards, eval shards, null source, kept/dropped (cached in <work>/data);
    ``shards_only``: the base and eval shards alone (all the decontamination check reads)."""
    data = work / "data"
    rows = load_wcxb()
    train_rows, heldout = split_heldout(rows)
    rng = random.Random(0)
    rng.shuffle(train_rows)
    half = len(train_rows) // 2
    base_rows, anneal_rows = train_rows[:half], train_rows[half:]

    def clean(rs):
        return [(r.get("file_id") or r.get("url") or "", r["main_content"]) for r in rs if (r["main_content"] or "").strip()]

    base, null_src, held = clean(base_rows), clean(anneal_rows), clean(heldout)

    def enc(t):
        return np.frombuffer(_bytes(t), dtype=np.uint8).astype(np.uint16)

    if not (data / "base" / "manifest.json").exists():
        write_shards(data / "base", "base", [enc(t) for _, t in base])
    if not (data / "heldout" / "manifest.json").exists():
        write_shards(data / "heldout", "heldout", [enc(t) for _, t in held])
    if shards_only:
        return None
    pipe = run_pipeline(work)
    return {"default": chunks([t for _, t in base], chunk), "null_source": null_src,
            "kept": chunks(pipe["kept"], chunk), "dropped": chunks(pipe["dropped"], chunk),
            "kept_docs": len(pipe["kept"]), "dropped_docs": len(pipe["dropped"]), "per_stage": pipe["per_stage"],
            "base_docs": len(base), "heldout_docs": len(held), "null_docs": len(null_src),
            "eval": str(data / "heldout"), "base": str(data / "base")}


def base_checkpoint(work: Path, base_path: str) -> str:
    """configs/train/tiny.yaml on the default pool, stopped at step 200 of 300 (cached)."""
    from cuvee.train.config import TrainConfig
    from cuvee.train.trainer import train

    ckpt = work / "base" / "checkpoints" / f"step_{BASE_STOP:07d}.pt"
    if ckpt.exists():
        return str(ckpt)
    cfg = yaml.safe_load((REPO / "configs/train/tiny.yaml").read_text())
    cfg.update(name="calibration_base", out_dir=str(work / "base"), eval_paths={}, steps=BASE_STEPS, threads=1)
    cfg["data"]["paths"] = [base_path]
    t0 = time.perf_counter()
    train(TrainConfig(**cfg), stop_after=BASE_STOP, quiet=True)
    print(f"[calibrate] base model: {BASE_STOP} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    return str(ckpt)


def build_arms(out: Path, slot_cand: list[np.ndarray], slot_ctrl: list[np.ndarray], default: list[np.ndarray],
               n_slot: int, seed: int) -> tuple[str, str, int]:
    """Two arms, same length, same default chunks at the same positions; the slot positions hold
    ``slot_cand`` in the candidate and ``slot_ctrl`` in the control (n_slot chunks each, drawn at random)."""
    rng = np.random.default_rng(seed)
    n_def = round(n_slot * (1 - SLOT_SHARE) / SLOT_SHARE)
    if len(slot_cand) < n_slot or len(slot_ctrl) < n_slot or len(default) < n_def:
        raise ValueError(f"not enough chunks: {len(slot_cand)}/{len(slot_ctrl)} slot, {len(default)} default")
    cand = [slot_cand[i] for i in rng.choice(len(slot_cand), n_slot, replace=False)]
    ctrl = [slot_ctrl[i] for i in rng.choice(len(slot_ctrl), n_slot, replace=False)]
    dflt = [default[i] for i in rng.choice(len(default), n_def, replace=False)]
    is_slot = np.zeros(n_slot + n_def, dtype=bool)
    is_slot[rng.choice(n_slot + n_def, n_slot, replace=False)] = True
    arms = {}
    for arm, slot in (("candidate", cand), ("control", ctrl)):
        it_s, it_d = iter(slot), iter(dflt)
        docs = [next(it_s) if s else next(it_d) for s in is_slot]
        sources = [{"name": "slot", "weight": SLOT_SHARE, "documents": n_slot, "realised_tokens": int(sum(map(len, slot)))},
                   {"name": "default", "weight": 1 - SLOT_SHARE, "documents": n_def, "realised_tokens": int(sum(map(len, dflt)))}]
        write_shards(out / arm, arm, docs, sources=sources, seed=seed)
        arms[arm] = str(out / arm)
    return arms["candidate"], arms["control"], n_slot + n_def


# ---- one repetition ---------------------------------------------------------------------------------------
def run_rep(job: dict) -> dict:
    """Build the arms of one repetition, run the paired anneal, return its row (runs in a worker process)."""
    import torch

    torch.set_num_threads(1)
    from cuvee.train.anneal import AnnealConfig, run_anneal

    rep_dir = Path(job["dir"])
    if rep_dir.exists():
        shutil.rmtree(rep_dir)
    t0 = time.perf_counter()
    cand, ctrl, n_docs = build_arms(rep_dir / "data", job["slot_cand"], job["slot_ctrl"], job["default"],
                                    job["n_slot"], job["data_seed"])
    t_data = time.perf_counter() - t0
    ac = AnnealConfig(name=f"{job['test']}_rep{job['rep']}", checkpoint=job["checkpoint"], candidate=[cand],
                      control=[ctrl], tokens=job["tokens"], eval={"heldout": job["eval"]}, eval_docs=job["eval_docs"],
                      seeds=job["seeds"], order="window", window=n_docs, threads=1,
                      out_dir=str(rep_dir / "anneal"))
    t1 = time.perf_counter()
    report = run_anneal(ac, quiet=True, fresh=True)
    wall = time.perf_counter() - t1
    s = report["sources"]["heldout"]
    d = report["decontamination"]["heldout"]
    row = {k: job[k] for k in ("test", "rep", "seeds", "tokens", "data_seed", "n_slot", "kept_is", "split_seed")
           if k in job}
    row |= {"effect": s["effect"], "ci95": s["ci95"], "p_value": s["p_value"], "mde": s["mde"], "verdict": s["verdict"],
            "per_seed_effect": s["per_seed_effect"], "seed_se": s.get("seed_se"), "document_se": s.get("document_se"),
            "candidate_bpb": s["candidate"], "control_bpb": s["control"], "documents": s["documents"],
            "decontam": {"pool": d["pool"], "duplicates": d["duplicates"], "overlap": d["overlap"], "scored": d["scored"],
                         "method": d["method"],
                         "exact_overlap": (d.get("details") or {}).get("exact_overlap"),
                         "near_overlap": (d.get("details") or {}).get("near_overlap")},
            "steps": report["averaging"]["candidate"][str(job["seeds"][0])]["total_steps"],
            "wall_s": wall, "build_s": t_data, "arm_docs": n_docs}
    if not job["keep"]:
        shutil.rmtree(rep_dir, ignore_errors=True)
    return row


# ---- decontamination positive control -------------------------------------------------------------------
DECONTAM_CASES = ("exact", "near", "pieces", "embedded", "half")  # 5 eval pages each, in this order


def decontam_check(work: Path, chunk: int, eval_docs: int) -> dict:
    """Does the check the anneal report runs catch planted overlap? A training source of 200 default pages plus
    5 eval pages each: copied exactly, with their last 10 % cut off (near-duplicates), cut into ``chunk``-byte
    pieces (the form the calibration arms use; each piece its own training document, shuffled among the
    others), embedded between two default pages in one training document, and their first half only; run
    through cuvee.train.decontam with AnnealConfig's defaults, as ``run_anneal`` calls it. The other
    ``eval_docs`` - 25 eval pages are planted nowhere: any of them removed is a false positive. No training."""
    from cuvee.train.anneal import AnnealConfig
    from cuvee.train.decontam import decontaminate
    from cuvee.train.shards import open_shards

    held = open_shards(str(work / "data" / "heldout"))
    base = open_shards(str(work / "data" / "base"))
    docs = [np.asarray(base.document(i)) for i in range(200)]
    ev = [np.asarray(held.document(i)) for i in range(25)]
    planted = [d.copy() for d in ev[:5]]
    planted += [d[: int(0.9 * len(d))] for d in ev[5:10]]
    planted += [d[i:i + chunk] for d in ev[10:15] for i in range(0, len(d) - chunk + 1, chunk)]
    planted += [np.concatenate([docs[k], d, docs[k + 1]]) for k, d in enumerate(ev[15:20])]
    planted += [d[: len(d) // 2] for d in ev[20:25]]
    random.Random(0).shuffle(planted)
    src = work / "data" / "contaminated"
    if src.exists():
        shutil.rmtree(src)
    write_shards(src, "contaminated", docs + planted)
    defaults = AnnealConfig.model_fields
    t0 = time.perf_counter()
    keep, rep = decontaminate({"heldout": str(work / "data" / "heldout")}, [str(src)], max_docs=eval_docs,
                              threshold=defaults["decontam_threshold"].default,
                              containment=defaults["containment"].default,
                              containment_ngram=defaults["containment_ngram"].default)
    e = rep["eval_sets"]["heldout"]
    removed = {int(r["index"]): r.get("reason") for r in e.get("removed", [])}
    caught = {case: sum(i in removed for i in range(5 * k, 5 * k + 5)) for k, case in enumerate(DECONTAM_CASES)}
    out = {"planted": {"exact (eval docs 0-4)": 5, "near, last 10 % cut (5-9)": 5, f"{chunk}-byte pieces (10-14)": 5,
                       "embedded between two pages (15-19)": 5, "first half only (20-24)": 5},
           "exact_overlap": e.get("exact_overlap"), "near_overlap": e.get("near_overlap"),
           "contained_overlap": e.get("contained_overlap"), "kept": len(keep["heldout"]), "removed": removed,
           "false_positives": sorted(i for i in removed if i >= 25 and removed[i] != "duplicate_within_eval"),
           "parameters": {k: rep["parameters"][k] for k in ("threshold", "containment", "containment_ngram")},
           **{f"caught_{case}": n for case, n in caught.items()}, "seconds": time.perf_counter() - t0}
    shutil.rmtree(src, ignore_errors=True)
    return out


def decontam_line(check: dict, chunk: int, eval_docs: int) -> str:
    caught = ", ".join(f"{case} {check[f'caught_{case}']}/5" for case in DECONTAM_CASES)
    return (f"Decontamination positive control (eval pool {eval_docs}): planted 5 exact + 5 near (last 10 % cut) + 5 cut "
            f"into {chunk}-byte pieces + 5 embedded between two pages + 5 first halves -> caught {caught}; "
            f"false positives {len(check['false_positives'])}/{max(eval_docs - 25, 0)} unplanted (report: exact_overlap "
            f"{check['exact_overlap']}, near_overlap {check['near_overlap']}, contained_overlap "
            f"{check['contained_overlap']}; {check['parameters']}; {check['seconds']:.1f} s)")


# ---- statistics ------------------------------------------------------------------------------------------
def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    from cuvee.train.verdict import _betainc

    def ppf(q, a, b):
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _betainc(a, b, mid) < q else (lo, mid)
        return (lo + hi) / 2

    if n == 0:
        return (0.0, 1.0)
    lo = 0.0 if k == 0 else ppf(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else ppf(1 - alpha / 2, k + 1, n - k)
    return lo, hi


def fmt_row(r: dict) -> str:
    lo, hi = r["ci95"]
    extra = f" kept={r['kept_is']}" if r["test"] == "power" else f" split={r['split_seed']}"
    return (f"| {r['test']} | {r['rep']} | {','.join(map(str, r['seeds']))} | {extra.strip()} | {r['effect']:+.4f} | "
            f"[{lo:+.4f}, {hi:+.4f}] | {r['p_value']:.2g} | {r['mde']:.4f} | {r['verdict']} | "
            f"{r['decontam']['duplicates']}/{r['decontam']['overlap']}/{r['decontam']['scored']} | {r['wall_s']:.0f} |")


def summarise(rows: list[dict]) -> str:
    from cuvee.train.verdict import BETTER, WORSE

    lines = ["| test | rep | seeds | arms | effect (ctrl-cand bpb) | 95 % CI | p | MDE | verdict | "
             "eval dup/overlap/scored | wall s |", "|---|---:|---|---|---:|---|---:|---:|---|---|---:|"]
    lines += [fmt_row(r) for r in sorted(rows, key=lambda r: (r["test"] != "null", r["rep"]))]
    lines.append("")
    for test in ("null", "power"):
        rs = [r for r in rows if r["test"] == test]
        if not rs:
            continue
        n = len(rs)
        walls = [r["wall_s"] for r in rs]
        runs = 2 * len(rs[0]["seeds"])
        time_txt = (f"wall per repetition (both arms x {len(rs[0]['seeds'])} seeds + eval) median {statistics.median(walls):.0f} s, "
                    f"min {min(walls):.0f}, max {max(walls):.0f}; per arm-seed run ~{statistics.median(walls) / runs:.0f} s")
        if test == "null":
            k = sum(r["verdict"] in (BETTER, WORSE) for r in rs)
            eq = sum(r["verdict"].startswith("no difference") for r in rs)
            lo, hi = clopper_pearson(k, n)
            lines.append(f"NULL ({rs[0]['n_slot']} slot chunks per arm): false better/worse verdicts {k}/{n} = {100 * k / n:.0f} % (Clopper-Pearson 95 % "
                         f"{100 * lo:.0f}-{100 * hi:.0f} %; target <= 10 %); 'no difference' {eq}/{n}, inconclusive "
                         f"{n - k - eq}/{n}; {time_txt}")
        else:
            ok = sum((r["verdict"] == BETTER) if r["kept_is"] == "candidate" else (r["verdict"] == WORSE) for r in rs)
            wrong = sum((r["verdict"] == WORSE) if r["kept_is"] == "candidate" else (r["verdict"] == BETTER) for r in rs)
            lo, hi = clopper_pearson(ok, n)
            sign = sum((r["effect"] > 0) == (r["kept_is"] == "candidate") for r in rs)
            eff = [r["effect"] if r["kept_is"] == "candidate" else -r["effect"] for r in rs]
            lines.append(f"POWER ({rs[0]['n_slot']} slot chunks per arm): kept ranked above dropped {ok}/{n} = {100 * ok / n:.0f} % (Clopper-Pearson 95 % "
                         f"{100 * lo:.0f}-{100 * hi:.0f} %; target >= 9/10); wrong direction {wrong}/{n}; point estimate "
                         f"favours kept {sign}/{n}; kept-minus-dropped advantage median {statistics.median(eff):+.4f} bpb "
                         f"(min {min(eff):+.4f}, max {max(eff):+.4f}); {time_txt}")
    return "\n".join(lines)


# ---- main ----------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="repetitions per test")
    ap.add_argument("--seeds", type=int, default=3, help="paired seeds per repetition (per arm)")
    ap.add_argument("--tokens", type=int, default=32768, help="anneal budget per run (tokens = bytes)")
    ap.add_argument("--work", default="runs/calibrate_anneal", help="work dir (data, base model, results cache)")
    ap.add_argument("--keep", action="store_true", help="keep each repetition's arm shards and anneal runs")
    ap.add_argument("--tests", default="null,power", help="comma list: null, power")
    ap.add_argument("--jobs", type=int, default=2, help="repetitions run in parallel (1 torch thread each)")
    ap.add_argument("--chunk", type=int, default=255, help="training chunk length in bytes (+ EOS)")
    ap.add_argument("--slot-chunks", type=int, default=200, help="slot (30 %%) chunks per arm")
    ap.add_argument("--null-chunks", type=int, default=3000,
                    help="null test: slot chunks per arm drawn from each half (capped by the default pool)")
    ap.add_argument("--eval-docs", type=int, default=60)
    ap.add_argument("--fresh", action="store_true", help="recompute cached repetition results")
    ap.add_argument("--decontam-check", action="store_true",
                    help="also plant overlap in a training source and report what cuvee.train.decontam catches")
    ap.add_argument("--decontam-only", action="store_true",
                    help="only the decontamination positive control (eval and base shards, no pipeline run or training)")
    ap.add_argument("--out", default=None, help="write rows + summary JSON here (default <work>/summary.json)")
    a = ap.parse_args(argv)

    work = Path(a.work).resolve()
    t_all = time.perf_counter()
    if a.decontam_only:
        prepare(work, a.chunk, shards_only=True)
        check = decontam_check(work, a.chunk, a.eval_docs)
        print(decontam_line(check, a.chunk, a.eval_docs))
        print(f"[calibrate] total wall {time.perf_counter() - t_all:.0f} s, load average {os.getloadavg()[0]:.1f}")
        out = Path(a.out) if a.out else work / "decontam_check.json"
        out.write_text(json.dumps({"args": vars(a), "decontam_check": check}, indent=1))
        return 0
    shared = prepare(work, a.chunk)
    ckpt = base_checkpoint(work, shared["base"])
    print(f"[calibrate] default pool {len(shared['default'])} chunks ({shared['base_docs']} pages), null source "
          f"{shared['null_docs']} pages, kept {shared['kept_docs']} docs -> {len(shared['kept'])} chunks, dropped "
          f"{shared['dropped_docs']} docs -> {len(shared['dropped'])} chunks, eval {shared['heldout_docs']} pages; "
          f"per stage {shared['per_stage']}", flush=True)
    n_slot = min(a.slot_chunks, len(shared["kept"]), len(shared["dropped"]))

    # null: the whole halves (capped by the default pool: 70 % default needs 7/3 x the slot chunks), so every
    # seed reads a different small sample of a large pool; --null-chunks 200 reproduces a fixed small pool
    n_null = min(a.null_chunks, len(shared["default"]) * 3 // 7)
    tags = {"power": f"t{a.tokens}_s{a.seeds}_c{a.chunk}_n{n_slot}_e{a.eval_docs}",
            "null": f"t{a.tokens}_s{a.seeds}_c{a.chunk}_n{n_null}_e{a.eval_docs}"}
    tag = tags["power"] if a.tests == "power" else tags["null"] if a.tests == "null" else f"{tags['null']}+{tags['power']}"
    for t in tags.values():
        (work / "results" / t).mkdir(parents=True, exist_ok=True)
    jobs = []
    for test in a.tests.split(","):
        for rep in range(a.reps):
            seeds = [1000 * (test == "power") + rep * a.seeds + i for i in range(a.seeds)]
            job = {"test": test, "rep": rep, "seeds": seeds, "tokens": a.tokens, "checkpoint": ckpt,
                   "eval": shared["eval"], "eval_docs": a.eval_docs, "default": shared["default"], "n_slot": n_slot,
                   "data_seed": 7919 * rep + (1 if test == "power" else 0), "keep": a.keep,
                   "dir": str(work / "reps" / f"{test}_rep{rep}")}
            if test == "null":
                split_seed = 100 + rep
                a_half, b_half = [], []
                for fid, text in shared["null_source"]:
                    (a_half if xxhash.xxh64_intdigest(fid, seed=split_seed) % 2 == 0 else b_half).append(text)
                ca, cb = chunks(a_half, a.chunk), chunks(b_half, a.chunk)
                job |= {"split_seed": split_seed, "slot_cand": ca, "slot_ctrl": cb, "n_slot": min(n_null, len(ca), len(cb)),
                        "dir": str(work / "reps" / f"{test}{n_null}_rep{rep}")}
            else:
                kept_is = "candidate" if rep % 2 == 0 else "control"
                k, d = shared["kept"], shared["dropped"]
                job |= {"kept_is": kept_is, "slot_cand": k if kept_is == "candidate" else d,
                        "slot_ctrl": d if kept_is == "candidate" else k}
            jobs.append((work / "results" / tags[test] / f"{test}_rep{rep}.json", job))

    rows, todo = [], []
    for path, job in jobs:
        if path.exists() and not a.fresh:
            rows.append(json.loads(path.read_text()))
        else:
            todo.append((path, job))
    # interleave null and power so a run cut short still has both
    todo.sort(key=lambda pj: (pj[1]["rep"], pj[1]["test"]))
    print(f"[calibrate] {len(rows)} repetitions cached, {len(todo)} to run ({a.jobs} in parallel); "
          f"anneal {a.tokens} tokens x {a.seeds} seeds x 2 arms each", flush=True)
    ctx = mp.get_context("spawn")
    with ctx.Pool(max(1, a.jobs), maxtasksperchild=1) as pool:
        for row in pool.imap_unordered(run_rep, [job for _, job in todo]):
            path = work / "results" / tags[row["test"]] / f"{row['test']}_rep{row['rep']}.json"
            path.write_text(json.dumps(row, indent=1))
            rows.append(row)
            print(fmt_row(row), flush=True)
    rows = [r for r in rows if r["rep"] < a.reps]
    summary = summarise(rows)
    check = None
    if a.decontam_check:
        check = decontam_check(work, a.chunk, a.eval_docs)
        summary += "\n" + decontam_line(check, a.chunk, a.eval_docs)
    total = time.perf_counter() - t_all
    print("\n" + summary)
    print(f"\n[calibrate] total wall {total:.0f} s on {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
          f"load average {os.getloadavg()[0]:.1f}")
    out = Path(a.out) if a.out else work / "summary.json"
    out.write_text(json.dumps({"args": vars(a), "tag": tag, "n_slot": n_slot, "n_null": n_null, "rows": rows, "summary": summary,
                               "per_stage": shared["per_stage"], "kept_docs": shared["kept_docs"],
                               "dropped_docs": shared["dropped_docs"], "kept_chunks": len(shared["kept"]),
                               "dropped_chunks": len(shared["dropped"]), "total_wall_s": total,
                               "decontam_check": check}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
