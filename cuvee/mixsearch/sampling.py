"""Mixtures over the bounded simplex {w : lo_i <= w_i <= hi_i, sum w = 1}.

Bounds: ``lo_i = min_weight``; ``hi_i = min(max_weight, max_epochs * available_i / tokens)``, so no mixture
asks a source for more repetitions than allowed at the largest budget it is trained with.

Scheme (deterministic from the search seed), N mixtures in this order:

1. the natural mix: each source's share of the available tokens, projected onto the bounds;
2. the corners: for each source, its largest feasible weight (the rest at their lower bounds, the
   remainder spread in proportion to natural shares) - the fit then sees every source at its extreme;
3. Dirichlet draws, alternating between draws around the natural shares, ``alpha_i = concentration * n *
   natural_i`` (floored at 0.05 so a small source is still explored), and flat draws, ``alpha_i = 1``
   (uniform over the simplex: without them the interior far from the natural mix holds no proxy, and a fit
   extrapolates there), each projected onto the bounds; draws within 1e-3 (L1) of a mixture already chosen
   are drawn again.

Room: N mixtures 1e-3 apart must fit in the bounds. Config validation refuses, in one line, an N beyond what
random draws can place there (:func:`room_error`: about 3/4 of the closest packing, exact for two sources);
the sampler asks again with the epoch caps, and gives up in one line (never with near-duplicate rows) after
100 N draws, or 10,000 in a row that land near a mixture already chosen. The draws are the ones a draw-by-draw
loop makes (the same plan as before for every N that found its mixtures), projected in batches (:class:`_Draws`).

Projection: the Euclidean projection onto the bounded simplex, ``w_i = clip(v_i - tau, lo_i, hi_i)`` with
``tau`` found by bisection so the weights sum to 1.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from cuvee.kernel.errors import UserError

MIN_L1 = 1e-3  # two mixtures closer than this (L1) would train the same proxy twice
MAX_DRAWS_PER_MIXTURE = 100  # sampling gives up after 100 N draws in all ...
MAX_MISSES = 10_000  # ... or this many in a row that all land near a mixture already chosen
PARKING = 0.7476  # random sequential placement on a line fills this share of the closest packing (Renyi 1958)


class BoundsError(UserError, ValueError):
    """Bounds (weights and epoch caps) that no mixture can meet."""


def bounds(min_w: list[float], max_w: list[float], max_epochs: list[float], available: list[int], tokens: int,
           names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(min_w, dtype=np.float64)
    cap = np.array([e * a / tokens for e, a in zip(max_epochs, available)], dtype=np.float64)
    hi = np.minimum(np.asarray(max_w, dtype=np.float64), cap)
    short = [f"{n} (min_weight {lo[i]:g} needs {lo[i] * tokens:,.0f} tokens, max_epochs allows "
             f"{cap[i] * tokens:,.0f})" for i, n in enumerate(names) if lo[i] > hi[i] + 1e-12]
    if short:
        raise BoundsError("epoch caps make the budget impossible for " + "; ".join(short))
    if hi.sum() < 1 - 1e-9:
        detail = ", ".join(f"{n} <= {h:.3g}" for n, h in zip(names, hi))
        raise BoundsError(f"the sources cannot fill {tokens:,} tokens within max_weight and max_epochs "
                          f"(at most {hi.sum():.3g} of it: {detail}); add data, raise max_epochs or lower the tokens")
    return lo, hi


def project(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto {lo <= w <= hi, sum w = 1} (bisection on the shift tau)."""
    return project_rows(np.asarray(v, dtype=np.float64)[None, :], lo, hi)[0]


def project_rows(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`project` of each row at once: every row gets the same bisection steps and sums as alone, so the
    same bits (a search's recorded plan must be computed again exactly), at a fraction of the per-row cost."""
    v = np.asarray(v, dtype=np.float64)
    a, b = (v - hi).min(1) - 1.0, (v - lo).max(1) + 1.0
    x = np.empty_like(v)
    for step in range(200):
        tau = 0.5 * (a + b)
        np.subtract(v, tau[:, None], out=x)
        above = np.minimum(np.maximum(x, lo, out=x), hi, out=x).sum(1) > 1  # np.clip, without its wrapper
        if step % 16 == 15 and np.array_equal(np.where(above, a, b), tau):
            break  # no row moves any more, so no later step would move one
        np.copyto(a, tau, where=above)
        np.copyto(b, tau, where=~above)
    w = np.clip(v - (0.5 * (a + b))[:, None], lo, hi)
    return _exact_sum(w, lo, hi)


def _exact_sum(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Put each row's rounding residue on a source with room, so it sums to 1 to the last bit it can."""
    flat = w.ndim == 1
    w = np.atleast_2d(w)
    r = 1.0 - w.sum(1)
    room = np.where((r > 0)[:, None], hi - w, w - lo)
    rows = np.arange(len(w))
    w[rows, np.argmax(room, 1)] += r
    return w[0] if flat else w


def natural(available: list[int], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    a = np.asarray(available, dtype=np.float64)
    return project(a / a.sum(), lo, hi)


def uniform(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return project(np.full(lo.size, 1.0 / lo.size), lo, hi)


def corner(i: int, nat: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Source i as large as the bounds allow; the others at their lower bounds plus the remainder in
    proportion to their natural shares (capped at their upper bounds)."""
    w = lo.copy()
    w[i] = min(hi[i], 1.0 - (lo.sum() - lo[i]))
    for _ in range(len(w)):
        rest = 1.0 - w.sum()
        if rest <= 1e-15:
            break
        room = np.where(np.arange(len(w)) == i, 0.0, hi - w)
        share = np.where(room > 0, np.maximum(nat, 1e-9), 0.0)
        if share.sum() == 0:
            break
        w += np.minimum(room, rest * share / share.sum())
    return _exact_sum(w, lo, hi)


def sample_mixtures(n_mixtures: int, available: list[int], lo: np.ndarray, hi: np.ndarray, seed: int,
                    concentration: float = 1.0) -> tuple[np.ndarray, list[str]]:
    """(N x sources weights, the kind of each: "natural", "corner:<i>", "dirichlet", "flat")."""
    too_many = room_error(n_mixtures, lo, hi, "min_weight / max_weight / max_epochs")
    if too_many:
        raise BoundsError(too_many)
    nat = natural(available, lo, hi)
    rows, kinds = [nat], ["natural"]
    for i in range(lo.size):
        rows.append(corner(i, nat, lo, hi))
        kinds.append(f"corner:{i}")
    chosen = _Chosen(rows, n_mixtures, int(np.argmax(hi - lo)))
    alpha = concentration * lo.size * np.maximum(nat, 0.05)
    draws = _Draws(np.random.default_rng(seed), (alpha, np.ones(lo.size)), lo, hi)
    tries = misses = 0
    while len(rows) < n_mixtures:
        kind = (len(rows) - lo.size - 1) % 2
        w = draws.next(kind)
        tries += 1
        if chosen.near(w):
            misses += 1
            if tries >= MAX_DRAWS_PER_MIXTURE * n_mixtures or misses >= MAX_MISSES:
                raise BoundsError(f"mixtures: only {len(rows)} of {n_mixtures} found {MIN_L1:g} apart (L1) in "
                                  f"{tries:,} draws ({misses:,} in a row near one already chosen); the bounds "
                                  f"hold at most {most_mixtures(lo, hi):,} and random draws fill fewer: ask for "
                                  f"fewer mixtures, widen min_weight / max_weight / max_epochs or lower concentration")
            continue
        misses = 0
        chosen.add(w)
        kinds.append(("dirichlet", "flat")[kind])
        rows.append(w)
    return np.asarray(rows[:n_mixtures]), kinds[:n_mixtures]


def room_error(n_mixtures: int, lo, hi, knobs: str = "min_weight / max_weight") -> str | None:
    """Why ``n_mixtures`` random mixtures cannot lie :data:`MIN_L1` apart within the bounds, or None. Config
    validation asks with the weight bounds alone, the sampler again with the epoch caps (they only narrow them).
    Random draws on a line stop finding room at about 3/4 of the closest packing (Renyi's parking constant,
    0.7476), and at less in more dimensions, so more than that plus the natural mix and the corners is refused."""
    most = most_mixtures(lo, hi)
    reachable = min(most, math.floor(PARKING * most) + len(lo) + 1)
    if n_mixtures <= reachable:
        return None
    return (f"mixtures: {n_mixtures} is more than random draws can place {MIN_L1:g} apart (L1) within the bounds: "
            f"at most {most:,} mixtures fit and random draws fill about 3/4 of that; ask for at most {reachable:,} "
            f"or widen {knobs}")


def most_mixtures(lo, hi, spacing: float = MIN_L1) -> int:
    """An upper bound on how many mixtures within the bounds lie pairwise ``spacing`` apart (L1), exact for two
    sources. Any S-1 weights fix the last one; two mixtures whose S-1 narrowest weights share a cube of side
    ``spacing / (2 (S-1))`` are closer than ``spacing``, so at most one mixture per cube."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    top = np.minimum(hi, 1.0 - (lo.sum() - lo))  # the range each weight really has, given the others' bounds
    bottom = np.maximum(lo, 1.0 - (hi.sum() - hi))
    side = spacing / (2 * (lo.size - 1))
    most = 1
    for width in np.sort(np.clip(top - bottom, 0.0, None))[:-1]:
        most *= math.floor(width / side * (1 + 1e-9)) + 1  # the margin: never below the true count
        if most > 10**12:
            break
    return most


class _Chosen:
    """The mixtures chosen so far, sorted by one weight: a draw is compared only with those within
    2 :data:`MIN_L1` of it in that weight (the L1 distance is at least the gap in any one weight)."""

    def __init__(self, rows: list[np.ndarray], n_mixtures: int, axis: int):
        self.w = np.empty((max(n_mixtures, len(rows)), len(rows[0])))
        self.axis, self.keys, self.order = axis, [], []
        for w in rows:
            self.add(w)

    def add(self, w: np.ndarray) -> None:
        i = bisect.bisect_right(self.keys, w[self.axis])
        self.keys.insert(i, w[self.axis])
        self.order.insert(i, len(self.order))
        self.w[len(self.order) - 1] = w

    def near(self, w: np.ndarray) -> bool:
        x = w[self.axis]
        i, j = bisect.bisect_left(self.keys, x - 2 * MIN_L1), bisect.bisect_right(self.keys, x + 2 * MIN_L1)
        return i < j and bool(np.abs(self.w[self.order[i:j]] - w).sum(1).min() < MIN_L1)


class _Draws:
    """The seed's projected Dirichlet draws, each of the kind asked (0: around the natural mix, 1: flat), exactly
    as a draw-by-draw loop makes them. Projection is the cost, so draws are made ahead in batches on a guess of
    the kinds to come (kinds alternate while most draws are kept, repeat while most are refused); where the
    guess is wrong the generator goes back to its state before that draw."""

    def __init__(self, rng: np.random.Generator, alphas: tuple[np.ndarray, np.ndarray], lo: np.ndarray,
                 hi: np.ndarray):
        self.rng, self.alphas, self.lo, self.hi = rng, alphas, lo, hi
        self.ahead: list[tuple[int, dict, np.ndarray]] = []  # (kind, generator state before it, projected draw)
        self.last_kind, self.used, self.repeats = -1, 0, 0.0

    def next(self, kind: int) -> np.ndarray:
        self.repeats = 0.9 * self.repeats + 0.1 * (kind == self.last_kind)  # ~ the share of recent draws refused
        if self.ahead and self.ahead[0][0] != kind:  # a wrong guess: draw again from where it began
            self.rng.bit_generator.state = self.ahead[0][1]
            self.ahead = []
        if not self.ahead:
            n = min(1024, max(4, 2 * self.used))  # twice as many as the last guess got right
            self.used = 0
            kinds = [kind if self.repeats > 0.5 else (kind + i) % 2 for i in range(n)]
            states, raw = [], []
            for k in kinds:
                states.append(self.rng.bit_generator.state)
                raw.append(self.rng.dirichlet(self.alphas[k]))
            self.ahead = list(zip(kinds, states, project_rows(np.asarray(raw), self.lo, self.hi)))
        self.last_kind, self.used = kind, self.used + 1
        return self.ahead.pop(0)[2]
