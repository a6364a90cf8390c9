"""``run_search``: SEARCH.yaml -> token caches -> N proxies -> fits -> pick (a mix YAML) -> proof -> report.

The search folder (``output_dir``) is a cuvee ``search`` folder (the kernel's workdir): claimed, locked for the
whole search and bound, before any work, to everything that decides its content (the resolved config, the
proxy's train config, the tokenizer and the source and target files). Each proxy and each proof run is a
job whose record (``proxies/pNNN.json``, ``proof/<arm>_seed<S>.json``) is written atomically when it ends; a
rerun of the same search trains only the jobs without a record (a job killed mid-way starts over: proxies
are short) and recomputes the fits, the pick and the report from the records, which gives the same pick
and report. ``events.jsonl`` logs every job trained, so "nothing trained twice" can be checked. Jobs run in
this process, in K local worker processes (one device each) or as a SLURM job array; the per-job locks that
let them share the folder with this coordinator are described in cuvee/mixsearch/jobs.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from cuvee.kernel.stamps import stamps
from cuvee.kernel.workdir import FolderError, Workdir, bind_check, owned
from cuvee.mixer.tokenizers import load_tokenizer
from cuvee.mixsearch import sampling
from cuvee.mixsearch.caches import (
    CACHE,
    clean_targets,
    open_cache,
    shard_tokenizer,
    tokenize_once,
)
from cuvee.mixsearch.config import (
    SearchConfig,
    SearchConfigError,
    current_weights,
    load_search_config,
)
from cuvee.mixsearch.fit import fit_of, fit_target, pick
from cuvee.mixsearch.jobs import Job, SearchError, Submitted, Trainer, write_json
from cuvee.mixsearch.phases import Placement, run_phase
from cuvee.mixsearch.progress import seconds, timed
from cuvee.mixsearch.proxies import steps_for
from cuvee.mixsearch.transfer import TransferBudgetError, check_budget, select, summarize
from cuvee.train.verdict import compare

WHAT = "search folder"
SEARCH_FOLDER = Workdir("search", WHAT)


def _tokenizer(cfg: SearchConfig):
    try:
        return load_tokenizer(cfg.tokenizer, num_threads=1)
    except Exception as e:  # noqa: BLE001 - unknown encoding, missing or unreadable file: one line
        raise SearchConfigError(f"search '{cfg.name}': cannot load tokenizer: {' '.join(str(e).split())}") from None


def _files(text_set) -> list[str]:
    from cuvee.mixer.sources import resolve_files

    return [os.path.abspath(f) for f in resolve_files(text_set.as_mix_source())]


def _inputs(binding: dict) -> dict[str, dict]:
    """The stamps of every source, target and task file the binding names: the kernel's changed-input check."""
    return stamps(f for files in binding["files"].values() for f in files)


def _binding(cfg: SearchConfig, train, tokenizer) -> dict:
    c = cfg.model_dump(mode="json")
    for key in ("output_dir", "threads", "description", "proof", "transfer"):  # proof, transfer: per job record
        c.pop(key)
    t = train.model_dump(mode="json")
    return {"config": c, "proxy_train": {k: t[k] for k in ("model", "optim", "micro_batch", "grad_accum", "attention")}
            | {"seq_len": t["data"]["seq_len"]}, "tokenizer": tokenizer.describe(),
            "files": {s.name: _files(s) for s in [*cfg.sources, *cfg.targets]}}


def _param_count(train, vocab_size: int) -> int:
    import torch

    from cuvee.train.model import Llama

    with torch.device("meta"):
        return int(Llama(train.resolved_model(vocab_size)).num_params())


def plan_mixtures(cfg: SearchConfig, available: list[int]) -> dict:
    names = [s.name for s in cfg.sources]
    budget = max(cfg.proxy.tokens, cfg.proof_tokens)
    try:
        lo, hi = sampling.bounds([s.min_weight for s in cfg.sources], [s.max_weight for s in cfg.sources],
                                 [s.max_epochs for s in cfg.sources], available, budget, names)
    except sampling.BoundsError as e:
        raise SearchError(f"search '{cfg.name}': {e}") from None
    w, kinds = sampling.sample_mixtures(cfg.mixtures, available, lo, hi, cfg.seed, cfg.concentration)
    return {"sources": names, "available_tokens": [int(a) for a in available], "lo": lo.tolist(), "hi": hi.tolist(),
            "mixtures": [[float(x) for x in row] for row in w], "kinds": kinds,
            "natural": sampling.natural(available, lo, hi).tolist(), "uniform": sampling.uniform(lo, hi).tolist()}


LM_ITEM_TOKENS = 256  # dry run: tokens assumed per lm-eval item (items are rendered only when the search runs)


def _scored(t, tok) -> tuple[int, int]:
    """A target's (scored documents, tokens each) as the dry run estimates them: the pool (before
    decontamination, so at most what is scored), each document's tokens from a sample, cut at max_doc_tokens."""
    if t.lm_eval:
        return t.pool, min(t.max_doc_tokens, LM_ITEM_TOKENS)
    from cuvee.mixer.sources import estimate_source, resolve_files

    src = t.as_mix_source()
    scan, _ = estimate_source(src, resolve_files(src), tok)
    return min(t.pool, int(scan.kept)), max(1, min(t.max_doc_tokens, round(scan.tokens / max(1, scan.kept))))


def dry_run(path, estimate: bool = True) -> dict:
    """The plan without tokenizing or training: available tokens estimated from a sample (as ``cuvee mix
    --dry-run``), mixtures, tokens and steps per proxy, parameters, the training FLOPs of the whole search and
    (``estimate``) its time in seconds, from proxy steps and fits timed on this machine (estimate.py)."""
    from cuvee.mixer.sources import estimate_source, resolve_files
    from cuvee.mixsearch import estimate as timing

    cfg, train = load_search_config(path)
    tok = _tokenizer(cfg)
    available = []
    for s in cfg.sources:
        scan, _ = estimate_source(s.as_mix_source(), resolve_files(s.as_mix_source()), tok)
        available.append(int(scan.tokens))
    scored = [_scored(t, tok) for t in cfg.targets]
    plan = plan_mixtures(cfg, available)
    arms = 3 + (cfg.proof.current is not None)
    proxy_tokens = _trained_tokens(train, cfg.proxy.tokens)
    proof_tokens = _trained_tokens(train, cfg.proof_tokens)
    transfer_tokens = _trained_tokens(train, cfg.transfer.tokens) if cfg.transfer else 0
    transfer_runs = cfg.transfer.top_k + cfg.transfer.bottom_k if cfg.transfer else 0
    proof_runs = arms * len(cfg.proof.seeds) if cfg.proof.enabled else 0
    total = cfg.mixtures * proxy_tokens + proof_runs * proof_tokens + transfer_runs * transfer_tokens
    seconds = None
    if estimate:  # first: its warm-up run pays the start-up a search's first job pays (building a model does)
        jobs = {"proxies": (cfg.mixtures, cfg.proxy.tokens), "proof": (proof_runs, cfg.proof_tokens),
                "transfer": (transfer_runs, cfg.transfer.tokens if cfg.transfer else 0)}
        seconds = timing.seconds(train, shard_tokenizer(tok), len(cfg.sources), scored, cfg.threads or 0,
                                 np.asarray(plan["mixtures"]), jobs)
    params = _param_count(train, tok.vocab_size)
    out = {**plan, "name": cfg.name, "dry_run": True, "available_estimated": True,
           "output_dir": str(cfg.resolved_out_dir()), "proxy_steps": steps_for(train, cfg.proxy.tokens),
           "proxy_tokens": proxy_tokens, "proof_runs": proof_runs, "proof_tokens": proof_tokens,
           "transfer_runs": transfer_runs, "transfer_tokens": transfer_tokens, "params": params,
           "total_train_tokens": total, "train_flops": 6.0 * params * total,
           "targets_scored": {t.name: {"documents": d, "tokens_each": e} for t, (d, e) in zip(cfg.targets, scored)}}
    if seconds is not None:
        out["seconds"] = seconds
    return out


def _trained_tokens(train, tokens: int) -> int:
    return steps_for(train, tokens) * train.data.seq_len * train.micro_batch * train.grad_accum


def _arms(cfg: SearchConfig, plan: dict, picked: np.ndarray) -> dict[str, list[float]]:
    arms = {"pick": [float(x) for x in picked], "natural": plan["natural"], "uniform": plan["uniform"]}
    cur = current_weights(cfg)
    if cur is not None:
        arms["current"] = [cur[n] for n in plan["sources"]]
    return arms


def _proof_look(cfg: SearchConfig, arms, folder: Path):
    """This proof's look under the declared plan (cuvee/train/sequential.py: a new seed set is a new look;
    looks.json), found before any proof run trains, so a look beyond the plan is refused without training."""
    from cuvee.train.sequential import next_look

    key = {"seeds": sorted(cfg.proof.seeds), "tokens": cfg.proof_tokens, "current": cfg.proof.current,
           "arms": sorted(arms)}
    plan = {"looks": cfg.proof.looks, "spending": cfg.proof.spending, "alpha": cfg.proof.alpha,
            "equivalence_margin": cfg.proof.equivalence_margin}
    return next_look(folder, key, plan, fresh_hint="--fresh"), key, plan


def _verdicts(cfg: SearchConfig, proof: dict, targets: dict, folder: Path) -> dict:
    """Per target and control arm: the paired verdict of the pick against that arm (cuvee/train/verdict.py), at
    the level of this proof's look."""
    from cuvee.train.sequential import record_look

    look, key, plan = _proof_look(cfg, proof, folder)
    out = {}
    for name, (_, _keep, doc_bytes) in targets.items():
        per = {}
        unit = "bpb" if doc_bytes is not None else "loss"
        weights = doc_bytes if doc_bytes is not None else None
        scale = 1 / np.log(2) if unit == "bpb" else 1.0
        cand = np.array([proof["pick"][s]["targets"][name]["doc_nats"] for s in cfg.proof.seeds])
        if weights is None:  # loss per token: the per-document token counts are the denominators
            weights = np.asarray(proof["pick"][cfg.proof.seeds[0]]["targets"][name]["doc_tokens"], dtype=np.float64)
        for arm in proof:
            if arm == "pick":
                continue
            ctrl = np.array([proof[arm][s]["targets"][name]["doc_nats"] for s in cfg.proof.seeds])
            v = compare(cand, ctrl, weights=weights, scale=scale, margin=cfg.proof.equivalence_margin,
                        alpha=look.level, **look.sizing()).to_dict()
            v["reason"] = f"{look.text()}; {v['reason']}"
            per[arm] = {"metric": unit, "pick": float(np.mean([proof["pick"][s]["targets"][name]["value"]
                                                               for s in cfg.proof.seeds])),
                        "control": float(np.mean([proof[arm][s]["targets"][name]["value"] for s in cfg.proof.seeds])),
                        **v, "look": look.to_dict()}
        out[name] = per
    record_look(folder, look, key, plan, {t: {a: v["verdict"] for a, v in per.items()} for t, per in out.items()})
    return out


WEAK_SPEARMAN = 0.5  # a chosen fit ranking the proxies worse than this cannot support a pick


def _weak_fits(fits: dict) -> list[str]:
    """A warning per target whose chosen fit ranks the proxies weakly, or no better than it ranks shuffled
    losses (permutation p above SIGNIFICANCE: the best of four fits on noise scores this well too)."""
    from cuvee.mixsearch.permutation import SIGNIFICANCE

    out = []
    for t, f in fits.items():
        rho, perm = f["fits"][f["chosen"]]["loo_spearman"], f.get("permutation") or {}
        weak, p = not np.isfinite(rho) or rho < WEAK_SPEARMAN, perm.get("p_value", 0.0)
        if weak or p > SIGNIFICANCE:
            why = (f"{rho:.2f} < {WEAK_SPEARMAN}, and" if weak else f"{rho:.2f}, but") + (
                f" shuffled losses score as well (permutation p {p:.3f} > {SIGNIFICANCE}, "
                f"{perm['permutations']} shuffles)" if p > SIGNIFICANCE else "")
            why = why.removesuffix(", and")
            out.append(f"target {t}: the best fit ({f['chosen']}) ranks held-out proxies with LOO Spearman {why}: "
                       f"the pick is not supported for this target (the proxies' differences are within their "
                       f"noise); use more or longer proxies, or more target documents")
    return out


def _plan_checked(cfg: SearchConfig, out: Path, metas: list[dict]) -> dict:
    plan = plan_mixtures(cfg, [m["tokens"] for m in metas])
    recorded = out / "plan.json"
    if recorded.exists() and json.loads(recorded.read_text()) != plan:
        raise SearchError(f"{recorded}: the recorded mixtures differ from the ones this search computes now "
                          f"(same config and files); refusing to mix records of two plans: use --fresh")
    return plan


def _trainer(cfg: SearchConfig, train, tok, out: Path, plan: dict, targets: dict, threads: int | None) -> Trainer:
    return Trainer(train, [open_cache(out, n) for n in plan["sources"]], list(plan["sources"]), shard_tokenizer(tok),
                   targets, cfg.threads if threads is None else threads)


def worker_trainer(path, out: Path, threads: int | None = None) -> tuple[str, Trainer]:
    """For a worker process or SLURM task: the folder re-validated against SEARCH.yaml (``bind_check``: a changed
    file is refused) and against its recorded plan, and the trainer; nothing is tokenized or written here."""
    cfg, train = load_search_config(path)
    tok = _tokenizer(cfg)
    binding = _binding(cfg, train, tok)
    fingerprint = bind_check(out, binding, what=WHAT, inputs=_inputs(binding))["fingerprint"]
    if not (out / "plan.json").exists() or not (out / CACHE / "decontamination.json").exists():
        raise SearchError(f"{WHAT} {out} is not prepared (no plan.json or decontamination report): start it with "
                          f"`cuvee mix search`")
    metas = [json.loads((out / CACHE / f"{s.name}.json").read_text()) for s in cfg.sources]
    plan = _plan_checked(cfg, out, metas)
    targets, _ = clean_targets(cfg, tok, out, say=lambda m: None)
    return fingerprint, _trainer(cfg, train, tok, out, plan, targets, threads)


def _worker_argv(path, out: Path) -> list[str] | None:
    if isinstance(path, dict):
        return None
    return [sys.executable, "-m", "cuvee.mixsearch.workers", "--config", os.path.abspath(path),
            "--out", os.path.abspath(out)]


def _threads(cfg: SearchConfig, placement: Placement) -> int:
    """Torch threads per worker: the config's, else the SLURM task's CPUs, else this machine's split."""
    if cfg.threads:
        return cfg.threads
    if placement.slurm is not None:
        return placement.slurm.cpus_per_task
    return max(1, (os.cpu_count() or 1) // placement.processes)


def run_search(path, out_dir: str | Path | None = None, fresh: bool = False, say=print,
               placement: Placement | None = None) -> dict:
    """Run (or resume) the search; returns the report (also ``report.json`` / ``report.md`` in the folder).

    ``placement``: where the jobs train (here by default; local workers or a SLURM array); raises
    :class:`Submitted` after submitting an array without waiting."""
    from cuvee.mixsearch import slurm
    from cuvee.mixsearch.report import (
        NOT_SUPPORTED,
        PICK,
        chosen_by,
        on_bounds,
        unsupported_because,
        write_pick_yaml,
        write_report,
    )

    placement = placement or Placement()
    cfg, train = load_search_config(path)
    tok = _tokenizer(cfg)
    binding = _binding(cfg, train, tok)  # resolves every source and target path: a missing one fails now
    out = Path(out_dir) if out_dir else cfg.resolved_out_dir()
    refuse_fresh = (lambda f: slurm.refuse_if_running(f, "--fresh would delete the files its tasks write")) \
        if fresh else None
    with owned(out, SEARCH_FOLDER, binding, fresh=fresh, inputs=_inputs(binding), before_fresh=refuse_fresh,
               before_sweep=lambda f: slurm.wait_for_earlier(f, placement.wait, say)) as opened:
        fingerprint = opened.plan["fingerprint"]  # the sweep came after waiting: an array's tasks write there
        t0 = time.perf_counter()
        metas = [tokenize_once(s, tok, out, s.max_epochs, say) for s in cfg.sources]
        for t in cfg.targets:
            tokenize_once(t, tok, out, 1.0, say)
        plan = _plan_checked(cfg, out, metas)
        if cfg.transfer is not None:
            try:
                check_budget(cfg.transfer.tokens, plan["sources"], plan["hi"], plan["available_tokens"],
                             [s.max_epochs for s in cfg.sources])
            except TransferBudgetError as e:
                raise SearchError(f"search '{cfg.name}': {e}") from None
        write_json(out / "plan.json", plan)
        targets, decontam = clean_targets(cfg, tok, out, say)
        trainer = _trainer(cfg, train, tok, out, plan, targets, None)
        argv, threads = _worker_argv(path, out), _threads(cfg, placement)

        def phase(name: str, jobs: list[Job]) -> list[dict]:
            return run_phase(out, name, jobs, trainer, placement, fingerprint, argv, threads, cfg.name, say)

        n = len(plan["mixtures"])
        proxies = phase("proxies", [
            Job("proxies", f"p{i:03d}", tuple(w), cfg.seed, cfg.proxy.tokens, _trained_tokens(train, cfg.proxy.tokens),
                f"proxy {i + 1}/{n}") for i, w in enumerate(plan["mixtures"])])
        w = np.asarray(plan["mixtures"])
        fits = {t.name: fit_target(w, np.array([p["targets"][t.name]["value"] for p in proxies]), say=say, name=t.name)
                for t in cfg.targets}
        warnings = _weak_fits(fits)
        for line in warnings:
            say(f"[search] warning: {line}")
        lo, hi = np.asarray(plan["lo"]), np.asarray(plan["hi"])
        order = np.argsort([sum(t.weight * p["targets"][t.name]["value"] for t in cfg.targets) for p in proxies])
        starts = np.vstack([w[order[:3]], [plan["natural"], plan["uniform"]]])
        picked, predicted = pick({n: fit_of(f) for n, f in fits.items()}, {t.name: t.weight for t in cfg.targets},
                                 lo, hi, starts)
        say(f"[search] fitted pick: {', '.join(f'{n} {x:.3f}' for n, x in zip(plan['sources'], picked))} "
            f"(predicted weighted metric {predicted:.4f})")
        proof = {}
        if cfg.proof.enabled:
            arms = _arms(cfg, plan, picked)
            _proof_look(cfg, arms, out)  # refuses a look beyond the plan before any proof run trains
            jobs = [Job("proof", f"{arm}_seed{seed}", tuple(aw), seed, cfg.proof_tokens,
                        _trained_tokens(train, cfg.proof_tokens), f"proof {arm} seed {seed}")
                    for seed in cfg.proof.seeds for arm, aw in arms.items()]
            for job, rec in zip(jobs, phase("proof", jobs)):
                proof.setdefault(job.stem.rsplit("_seed", 1)[0], {})[job.seed] = rec
        verdicts = _verdicts(cfg, proof, targets, out) if proof else {}
        transfer = None
        if cfg.transfer is not None:
            tw = {t.name: t.weight for t in cfg.targets}
            chosen = select(proxies, tw, cfg.transfer.top_k, cfg.transfer.bottom_k)
            tt = cfg.transfer.tokens
            reruns = phase("transfer", [
                Job("transfer", f"p{i:03d}_{tt}", tuple(plan["mixtures"][i]), cfg.seed, tt, _trained_tokens(train, tt),
                    f"transfer proxy {i} at {tt:,} tokens") for i in chosen])
            transfer = summarize(proxies, chosen, reruns, tw, cfg.transfer.top_k)
        report = {"name": cfg.name, "config": cfg.model_dump(mode="json"), "plan": plan, "proxies": [
                      {k: v for k, v in p.items()} | {"targets": {n: {k: x for k, x in r.items() if not k.startswith("doc_")}
                                                      for n, r in p["targets"].items()}} for p in proxies],
                  "fits": fits, "pick": {"weights": dict(zip(plan["sources"], picked.tolist())), "predicted": predicted,
                                         "on_bounds": on_bounds(plan["sources"], picked, lo, hi, fits)},
                  "decontamination": decontam, "verdicts": verdicts, "transfer": transfer, "warnings": warnings,
                  "proof": {arm: {str(s): {k: v for k, v in r.items() if k != "targets"} | {
                      "targets": {n: x["value"] for n, x in r["targets"].items()}} for s, r in runs.items()}
                      for arm, runs in proof.items()}}
        why = unsupported_because(report)
        report["pick"].update({"supported": not why, "not_supported_because": why,
                               "mix_yaml": str(out / (NOT_SUPPORTED if why else PICK))})
        with timed(say, "writing report.md, report.json and the figures"):
            write_report(out, report)
        write_pick_yaml(cfg, plan["sources"], picked, out, chosen_by(report, out))
    if report["pick"]["on_bounds"]:
        say(f"[search] {report['pick']['on_bounds']['note']}")
    say(f"[search] done in {seconds(time.perf_counter() - t0)} this session")
    return report


__all__ = ["FolderError", "Placement", "SearchError", "Submitted", "dry_run", "run_search", "worker_trainer"]
