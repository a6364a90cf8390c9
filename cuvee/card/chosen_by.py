"""The card's account of a mix whose weights came from ``cuvee mix search``: the ``chosen_by`` block the
search writes into the pick's mix config (and so into the mix manifest's ``config``).

Manifests are not trusted: every value is escaped (``cuvee.card.escape``), a number that is not one shows as
escaped text, and a block of the wrong shape gives one line saying so instead of a table.
"""

from __future__ import annotations

import math
from typing import Any

from cuvee.card.escape import Md, code, text


def _num(v: Any, fmt: str) -> Md:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return Md(format(v, fmt)) if math.isfinite(v) else Md("n/a")
    return Md("–") if v is None else code(v)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(c: Any) -> str:
        s = c if isinstance(c, Md) else text(c)
        return s.replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows])


def chosen_by_lines(manifest: dict) -> list[str]:
    """Markdown lines for the card's mix section (empty when the mix was not chosen by a search)."""
    block = (manifest.get("config") or {}).get("chosen_by") if isinstance(manifest.get("config"), dict) else None
    if block is None:
        return []
    lines = ["", "### How these weights were chosen", ""]
    if not isinstance(block, dict):
        return lines + [f"The mix config's `chosen_by` is not a mapping ({code(type(block).__name__)}); not shown."]
    lines.append(f"By `cuvee mix search` (search {code(block.get('search', '?'))}; report {code(block.get('report', '?'))}): "
                 "small proxy models trained on mixtures of these sources, a model of the held-out target metric fitted "
                 "to them and chosen by leave-one-out (LOO) rank correlation, and these weights minimise its prediction.")
    if block.get("supported") is False:  # written as pick.NOT-SUPPORTED.yaml; a mix built from it says so
        why = block.get("not_supported_because")
        lines += ["", "**Not supported by the search**: it wrote these weights to be inspected, not as a mix to train:",
                  "", *(f"- {text(w, 600)}" for w in (why if isinstance(why, list) else []))]
    elif block.get("supported") is True:
        lines += ["", "Supported by the search: every target's fit ranks the proxies beyond chance and no proof arm "
                  "measured better than these weights."]
    warnings = block.get("warnings")
    for w in warnings if isinstance(warnings, list) else []:
        lines += ["", f"**Warning from the search:** {text(w, 600)}"]
    fits = block.get("fits")
    if isinstance(fits, dict) and fits:
        rows = [[code(t), code(f.get("fit")), _num(f.get("loo_spearman"), ".3f"), _num(f.get("loo_rmse"), ".4g"),
                 _num(f.get("proxies"), "d"), _num(f.get("permutation_p"), ".3g")]
                if isinstance(f, dict) else [code(t), code(f), "–", "–", "–", "–"] for t, f in fits.items()]
        lines += ["", _table(["target", "fit", "LOO Spearman", "LOO RMSE", "proxies", "permutation p"], rows),
                  "", "Permutation p: how often the proxies' losses, shuffled, let the best fit family rank them at "
                  "least this well (small: the fit's ranking is not chance)."]
    proof = block.get("proof")
    if isinstance(proof, dict) and proof:
        rows = []
        for t, per in proof.items():
            for arm, v in (per.items() if isinstance(per, dict) else []):
                v = v if isinstance(v, dict) else {}
                ci = v.get("ci95") if isinstance(v.get("ci95"), list) and len(v.get("ci95")) == 2 else [None, None]
                rows.append([code(t), code(arm), text(v.get("verdict", "?")), code(v.get("metric", "?")),
                             _num(v.get("effect"), "+.4f"), Md(f"[{_num(ci[0], '+.4f')}, {_num(ci[1], '+.4f')}]"),
                             text(v.get("reason", "–"), 400)])
        lines += ["", "Proof: these weights against other mixes, trained from scratch with paired seeds "
                  "(effect = control − these weights; positive: these weights are better).", "",
                  _table(["target", "against", "verdict", "metric", "effect", "95 % CI", "why"], rows)]
    else:
        lines += ["", f"Proof: {text(proof if proof is not None else 'not recorded')}."]
    lines += ["", f"Transfer check (ranks at a larger budget): {text(block.get('transfer', 'not recorded'))}."]
    return lines
