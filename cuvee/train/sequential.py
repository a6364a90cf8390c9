"""Sequential looks for paired verdicts: adding seeds after an "inconclusive" verdict is a second look at the
data, so each look is tested at its own, smaller level and the family-wise error over all looks stays <= alpha.

Why: testing again at alpha after every batch of added seeds ("optional stopping") inflates the false
"better/worse" rate - with 3 looks at alpha = 0.05 it is about 0.08-0.1 (tests/test_verdict_sequential.py).

Plan (declared up front, in the config): ``looks`` = K, the most looks the user will take, and ``spending``, a
Lan-DeMets alpha-spending function of the information fraction t = k/K (the planned look number, not the
seeds seen, so the levels are known before any data):

* ``obrien_fleming`` (O'Brien-Fleming type): alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) - spends almost
  nothing early (0.0056 of 0.05 at t = 1/2), keeps nearly all of alpha for the last look;
* ``pocock`` (Pocock type): alpha(t) = alpha ln(1 + (e - 1) t) - spends evenly (0.031 at t = 1/2).

Look k is tested at alpha_k = alpha(k/K) - alpha((k-1)/K) (its paired-t interval is the 1 - alpha_k interval).
Bound stated and proved: the union bound, P(any false "better/worse" over looks 1..k) <= sum_{j<=k} alpha_j =
alpha(k/K) <= alpha(1) = alpha, whatever the correlation between looks (the looks share seeds, so the true
rate is lower; the exact group-sequential boundaries would need the joint law of the t statistics, which the
document noise and the Welch-Satterthwaite df do not give in closed form). K = 1 is the single test at alpha.

A look is a verdict on a new *key* (the sorted seed set and the settings the verdict is drawn from): the same
key again is the same look, so a rerun is idempotent. A key beyond look K is refused before any training
(rather than tested at a further level whose family-wise rate would exceed alpha): the plan is made before
seeing data, and the one honest remedy is a new ablation that declares more looks. A changed plan (looks,
spending, alpha or margin) after a look is refused for the same reason: re-planning after seeing data.
The record is ``looks.json`` in the command's folder, written atomically under the folder's lock.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cuvee.kernel.atomic import write_text as atomic_write_text
from cuvee.kernel.workdir import FolderError

Spending = Literal["obrien_fleming", "pocock"]
SPENDING = ("obrien_fleming", "pocock")
RECORD = "looks.json"


class LookError(FolderError):
    """A look the plan does not allow (beyond K, or after a changed plan): refused before work."""


def spent(t: float, alpha: float, spending: str) -> float:
    """Cumulative alpha spent at information fraction ``t`` in [0, 1] (Lan-DeMets spending function)."""
    if spending not in SPENDING:
        raise ValueError(f"spending {spending!r}: expected one of {', '.join(SPENDING)}")
    if t <= 0:
        return 0.0
    if t >= 1:
        return alpha
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    from scipy import stats  # here, not at import: config validation imports this module and must stay quick

    return float(2 * stats.norm.sf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


def levels(looks: int, alpha: float, spending: str) -> list[float]:
    """Per-look test levels alpha_1..alpha_K; they sum to alpha (up to rounding)."""
    if looks < 1:
        raise ValueError("looks must be >= 1")
    cum = [spent(k / looks, alpha, spending) for k in range(looks + 1)]
    return [cum[k] - cum[k - 1] for k in range(1, looks + 1)]


@dataclass(frozen=True)
class Look:
    """Look ``k`` of ``looks``; ``new``: not recorded yet (recorded once its verdicts exist)."""

    k: int
    looks: int
    alpha: float
    spending: str
    new: bool

    @property
    def level(self) -> float:
        return levels(self.looks, self.alpha, self.spending)[self.k - 1]

    @property
    def spent(self) -> float:
        """Family-wise false "better/worse" bound over looks 1..k (union bound)."""
        return spent(self.k / self.looks, self.alpha, self.spending)

    @property
    def next_level(self) -> float | None:
        """The level of look k + 1 (where added seeds would be judged); None when no look is left."""
        return levels(self.looks, self.alpha, self.spending)[self.k] if self.k < self.looks else None

    def sizing(self) -> dict:
        """compare()'s ``next_alpha``/``looks_left``: seeds needed at the next look's level, or - every look
        spent - for a new ablation at the plan's alpha."""
        nxt = self.next_level
        return {"next_alpha": self.alpha if nxt is None else nxt, "looks_left": nxt is not None}

    def text(self) -> str:
        s = (f"look {self.k} of {self.looks} ({self.spending.replace('_', '-')} spending), tested at "
             f"alpha_{self.k} = {self.level:.3g}; family-wise false 'better/worse' rate <= {self.spent:.3g}")
        return s + (f" (<= {self.alpha:.3g} over all {self.looks} looks)" if self.k < self.looks else "")

    def to_dict(self) -> dict:
        return {"look": self.k, "looks": self.looks, "spending": self.spending, "alpha": self.alpha,
                "alpha_tested": self.level, "familywise_bound": self.spent, "next_alpha": self.next_level,
                "text": self.text()}


def _read(folder: Path) -> dict:
    path = folder / RECORD
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LookError(f"{path}: unreadable look record ({e}); it is what keeps the verdict's error rate - "
                        f"restore it, or start over with a fresh folder") from None
    if not isinstance(data, dict) or not isinstance(data.get("looks"), list) or not isinstance(data.get("plan"), dict):
        raise LookError(f"{path}: not a look record (expected {{'plan': ..., 'looks': [...]}})")
    return data


def _canon(x) -> str:
    return json.dumps(x, sort_keys=True)


def next_look(folder: str | Path, key: dict, plan: dict, fresh_hint: str) -> Look:
    """Which look ``key`` is under ``plan`` ({looks, spending, alpha, ...}), from the folder's record.

    Raises LookError (one line) for a changed plan or a new key beyond the declared looks. Writes nothing."""
    folder = Path(folder)
    data = _read(folder)
    K, alpha, spending = int(plan["looks"]), float(plan["alpha"]), str(plan["spending"])
    recorded = data.get("looks", [])
    if data and _canon(data["plan"]) != _canon(plan):
        old = data["plan"]
        changed = ", ".join(f"{k} {old.get(k)!r} -> {plan.get(k)!r}" for k in sorted(set(plan) | set(old))
                            if old.get(k) != plan.get(k))
        raise LookError(f"{folder}: {changed} "
                        f"after {len(recorded)} recorded look(s) would re-plan the test after seeing data; keep "
                        f"the plan, or start over ({fresh_hint})")
    if recorded and _canon(recorded[-1].get("key")) == _canon(key):
        return Look(len(recorded), K, alpha, spending, new=False)
    if len(recorded) >= K:
        raise LookError(f"{folder}: all {K} planned look(s) are spent ({len(recorded)} recorded); judging a "
                        f"changed seed set again would exceed the stated error rate - declare more looks up "
                        f"front (looks: N) in a new ablation, or rerun the last look's seeds")
    return Look(len(recorded) + 1, K, alpha, spending, new=True)


def record_look(folder: str | Path, look: Look, key: dict, plan: dict, verdicts: dict) -> None:
    """Append ``look`` (its key, level and verdicts) to the folder's record, atomically; a known look is kept."""
    if not look.new:
        return
    folder = Path(folder)
    data = _read(folder) or {"plan": plan, "looks": []}
    if len(data["looks"]) != look.k - 1:
        raise LookError(f"{folder / RECORD}: changed while this look ran (expected {look.k - 1} looks recorded)")
    data["looks"].append({"look": look.k, "key": key, "n": len(key.get("seeds", [])), "alpha_tested": look.level,
                          "familywise_bound": look.spent, "verdicts": verdicts})
    atomic_write_text(folder / RECORD, json.dumps(data, indent=2, sort_keys=True) + "\n")
