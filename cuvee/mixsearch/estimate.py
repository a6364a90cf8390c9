"""The dry run's time estimate, measured on this machine rather than modelled.

Training: :func:`~cuvee.mixsearch.proxies.train_proxy` itself (the proxy's model, optimizer, blend, loader,
device and threads) runs on random token caches the size of a proxy's reads and random targets the size of the
real ones (scored documents x tokens each, as estimated from a sample): for one step and for ``1 + STEPS``
steps, the faster of two runs each (a busy machine slows some runs down, never speeds one up). The difference
gives the time per optimizer step, the rest the fixed cost of a run (model set-up and scoring every target), so
a job of S steps costs ``fixed + S * per_step``; a warm-up run before them measures the start-up a process pays
once (lazy imports, kernels), counted once.

Fits: one refit of each family on proxies of the planned mixtures, times the refits a search does per target
(leave-one-out over N proxies, then the full fit), plus the permutation test timed whole. A refit's time
depends on the losses: on noise (what small proxies usually measure, their differences within their noise, as in
the bundled demo) the nonlinear least squares run to their iteration caps, 10-60x longer than on losses that
follow a law (a planted power law). The estimate counts the noise case and gives the law case beside it.

Not covered: tokenizing and decontaminating (done once, cached) and the report.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from cuvee.mixer.indexed import IndexedDataset, IndexedDatasetWriter, dtype_for_vocab
from cuvee.mixsearch.families import POWER_EPS
from cuvee.mixsearch.fit import FITS, FITTERS
from cuvee.mixsearch.permutation import PERMUTATIONS, permutation_test
from cuvee.mixsearch.proxies import steps_for, train_proxy
from cuvee.train.shards import ShardSet

STEPS = 4  # measured steps beyond the first (the first also pays for any lazy start-up)


def _cache(prefix: Path, tokens: int, doc_tokens: int, vocab: int, eos: int | None, rng) -> IndexedDataset:
    """Random token documents (never the EOS id inside one), ``doc_tokens`` each, ``tokens`` in all."""
    with IndexedDatasetWriter(prefix, dtype_for_vocab(vocab)) as w:
        high = max(1, vocab - 1)
        for _ in range(max(1, -(-tokens // doc_tokens))):
            ids = rng.integers(0, high, doc_tokens)
            if eos is not None:
                ids[ids >= eos] += 1
            w.add_document(ids)
    return IndexedDataset(prefix)


def training(train, tokenizer: dict, sources: int, target_docs: list[tuple[int, int]], threads: int) -> dict:
    """Seconds per optimizer step and fixed seconds per run of the proxy, measured (see the module docstring).

    ``target_docs``: per target, (scored documents, tokens each)."""
    seq, mb, ga = train.data.seq_len, train.micro_batch, train.grad_accum
    tokens = (1 + STEPS) * seq * mb * ga
    vocab, eos = tokenizer["vocab_size"], tokenizer.get("eos_id")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="cuvee-estimate-") as tmp:
        caches = [_cache(Path(tmp) / f"s{i}", tokens + 2 * seq, 2 * seq, vocab, eos, rng) for i in range(sources)]
        targets = {}
        for k, (docs, each) in enumerate(target_docs):
            shards = ShardSet(datasets=[_cache(Path(tmp) / f"t{k}", docs * each, each, vocab, eos, rng)],
                              tokenizer=dict(tokenizer))
            targets[f"t{k}"] = (shards, np.arange(docs), np.full(docs, float(each)))
        names, weights = [f"s{i}" for i in range(sources)], [1.0 / sources] * sources

        def run(steps: int) -> float:
            t0 = time.perf_counter()
            train_proxy(train, caches, names, weights, steps * seq * mb * ga, 0, tokenizer, targets, threads)
            return time.perf_counter() - t0

        first = run(1)  # pays the process's start-up once (lazy imports, kernels, allocator), as a search's first job
        one, more = min(run(1), run(1)), min(run(1 + STEPS), run(1 + STEPS))  # the least disturbed of two
    per_step = max(0.0, (more - one) / STEPS)
    return {"per_step_s": per_step, "fixed_s": max(0.0, one - per_step), "startup_s": max(0.0, first - one)}


SAMPLE = (24, 48)  # mixtures the fits are timed on; larger plans are extrapolated (linear in N)
PERM_TIMED = 10  # permutations timed; the rest extrapolated


def _fit_times(w: np.ndarray, y: np.ndarray) -> float:
    """Seconds of one leave-one-out refit (N - 1 proxies) of every family."""
    t = 0.0
    for kind in FITS:
        t0 = time.perf_counter()
        FITTERS[kind](w[1:], y[1:])
        t += time.perf_counter() - t0
    return t


def fitting(mixtures: np.ndarray, targets: int, permutations: int = PERMUTATIONS) -> dict:
    """Seconds of fitting and permutation testing for ``targets`` targets over ``mixtures`` (N x sources), for
    losses the proxies cannot tell apart (``fits_s``: noise, the nonlinear fits run to their iteration caps; what
    small proxies usually give, the bundled demo included) and for losses that follow a law (``fits_law_s``).

    Bounded in time whatever N: a refit is timed on the first ``SAMPLE`` mixtures and extrapolated linearly to N
    (the least-squares work per iteration grows with the rows), and the permutation test is timed for
    ``PERM_TIMED`` permutations and scaled to ``permutations`` (each permutation is one more refit of the linear
    cores). A plan of 2,000 mixtures is estimated in seconds instead of timing 2,000 refits."""
    w = np.asarray(mixtures, dtype=np.float64)
    n = len(w)
    rng = np.random.default_rng(0)
    y_all = {"noise": 4.0 + rng.normal(0, 0.01, n),
             "law": 3.0 + (0.1 * (w + POWER_EPS) ** -0.3).sum(1) + rng.normal(0, 0.01, n)}
    sizes = sorted({min(n, k) for k in SAMPLE})
    out = {}
    for case, y in y_all.items():
        timed = [(k, _fit_times(w[:k], y[:k])) for k in sizes]
        if len(timed) == 1 or timed[-1][0] == n:
            refit = timed[-1][1]
        else:
            (k1, t1), (k2, t2) = timed
            slope = max(0.0, (t2 - t1) / (k2 - k1))
            refit = t2 + slope * (n - k2)
        out[f"refit_{case}_s"] = refit
    m = min(n, SAMPLE[-1])
    t0 = time.perf_counter()
    permutation_test(w[:m], y_all["noise"][:m], min(PERM_TIMED, permutations), 0)
    perm = targets * (time.perf_counter() - t0) * (permutations / min(PERM_TIMED, permutations)) * (n / m)
    return {"fits_s": targets * (n + 1) * out["refit_noise_s"] + perm,
            "fits_law_s": targets * (n + 1) * out["refit_law_s"] + perm}


def seconds(train, tokenizer: dict, sources: int, target_docs: list[tuple[int, int]], threads: int,
            mixtures: np.ndarray, jobs: dict[str, tuple[int, int]]) -> dict:
    """The estimate: per phase (``jobs``: phase -> (runs, tokens each)) and for the fits, with what it rests on."""
    t = training(train, tokenizer, sources, target_docs, threads)
    out = {"per_step_s": t["per_step_s"], "fixed_per_run_s": t["fixed_s"], "startup": t["startup_s"]}
    for phase, (runs, tokens) in jobs.items():
        out[phase] = runs * (t["fixed_s"] + steps_for(train, tokens) * t["per_step_s"]) if runs else 0.0
    f = fitting(mixtures, len(target_docs))
    out["fits"], out["fits_law"] = f["fits_s"], f["fits_law_s"]
    out["total"] = sum(out[k] for k in ("startup", *jobs, "fits"))
    return out
