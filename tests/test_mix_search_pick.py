"""What the search says about its pick: ``pick.yaml`` only for a pick the search supports, else
``pick.NOT-SUPPORTED.yaml`` headed by why (and the other name removed); report.md, the CLI's last line and the
card say which; a pick on a corner of the bounds is said to be one; progress lines are rationed by time."""

from __future__ import annotations

import numpy as np
import yaml

from test_mix_search import _config, _yaml

FIT = {"chosen": "ridge", "spearman_tol": 0.02, "permutation": {"p_value": 0.01, "observed": 0.9, "null_p95": 0.5,
                                                                "permutations": 200, "seed": 0, "exceed": 1},
       "fits": {"ridge": {"loo_spearman": 0.9, "loo_rmse": 0.01, "loo_mae": 0.01, "diverged": False}}}


def _verdict(verdict: str, effect: float) -> dict:
    return {"verdict": verdict, "metric": "bpb", "pick": 3.0 - effect, "control": 3.0, "effect": effect,
            "ci95": [effect - 0.01, effect + 0.01], "reason": "r", "p_value": 0.01, "per_seed_effect": [effect],
            "seeds_needed": None}


def _report(warnings=(), verdicts=None, transfer=None) -> dict:
    proxy = {"tokens": 1, "params": 1, "steps": 1, "weights": [1.0, 0.0], "wall_s": 1.0, "cpu_s": 1.0,
             "targets": {"docs": {"value": 3.0}}}
    return {"name": "s", "plan": {"sources": ["en", "de"], "available_tokens": [1, 1], "lo": [0, 0], "hi": [1, 1],
                                  "natural": [0.5, 0.5], "uniform": [0.5, 0.5], "kinds": ["natural"]},
            "config": {"targets": [{"name": "docs", "weight": 1}], "proof": {"seeds": [0]}}, "proxies": [proxy],
            "fits": {"docs": FIT}, "warnings": list(warnings), "verdicts": verdicts or {}, "transfer": transfer,
            "proof": {arm: {"0": {"tokens": 1, "shares_trained": {"en": 1.0, "de": 0.0}}}
                      for arm in ["pick", *next(iter((verdicts or {}).values()), {})]} if verdicts else {},
            "decontamination": {"targets": {}},
            "pick": {"weights": {"en": 1.0, "de": 0.0}, "predicted": 3.0, "on_bounds": None}}


def _cfg(tmp_path):
    from cuvee.mixsearch.config import load_search_config

    files = {n: str(tmp_path / f"{n}.jsonl") for n in ("en", "de", "ru", "target")}
    return load_search_config(_yaml(tmp_path / "s.yaml", _config(files)))[0]


def _write(report: dict, tmp_path):
    from cuvee.mixsearch.report import NOT_SUPPORTED, PICK, chosen_by, unsupported_because, write_pick_yaml

    why = unsupported_because(report)
    report["pick"].update({"supported": not why, "not_supported_because": why,
                           "mix_yaml": str(tmp_path / (NOT_SUPPORTED if why else PICK))})
    cfg = _cfg(tmp_path)
    return write_pick_yaml(cfg, ["en", "de", "ru"], np.array([0.6, 0.4, 0.0]), tmp_path, chosen_by(report, tmp_path))


def test_an_unsupported_pick_is_no_ready_mix_config_and_everything_says_so(tmp_path):
    from cuvee.card.chosen_by import chosen_by_lines
    from cuvee.mixsearch.report import pick_line, render_markdown

    weak = "target docs: the best fit (ridge) ranks held-out proxies with LOO Spearman 0.30 < 0.5: the pick is not supported"
    report = _report([weak], {"docs": {"natural": _verdict("control better", -0.03),
                                       "uniform": _verdict("inconclusive", 0.01)}},
                     {"verdict": "ranks did not hold", "transfer_tokens": 8192, "top_k": 1, "bottom_k": 1,
                      "mixtures": [0, 0], "proxy_tokens": 4096, "targets": {}})
    (tmp_path / "pick.yaml").write_text("# a ready pick of an earlier look\n")
    path = _write(report, tmp_path)
    assert path.name == "pick.NOT-SUPPORTED.yaml" and not (tmp_path / "pick.yaml").exists()
    why = report["pick"]["not_supported_because"]
    assert why[0] == weak and len(why) == 3
    assert why[1].startswith("target docs: the pick measured worse than the natural mix in the proof (bpb 3.0300 "
                             "against 3.0000, effect -0.0300")
    assert why[2] == "the proxies' ranks did not hold at 8,192 tokens (transfer check)"
    text = path.read_text()
    assert text.startswith("# NOT SUPPORTED: cuvee mix search does not support these weights.")
    assert all(f"# - {w}\n" in text for w in why)
    mix = yaml.safe_load(text)
    assert mix["name"] == "planted_pick_not_supported" and mix["chosen_by"]["supported"] is False
    assert mix["chosen_by"]["not_supported_because"] == why
    md = render_markdown(report)
    assert f"**Not supported**: written as `{path}` to be inspected, not as a mix to train" in md
    assert all(f"- {w}" in md for w in why) and "Ready mix config" not in md and "ready mix config" not in md
    assert pick_line(report) == (f"[search] pick NOT SUPPORTED (3 reasons in report.md): written as {path} for "
                                 f"inspection, not as a mix to train")
    card = "\n".join(chosen_by_lines({"config": mix}))
    assert "**Not supported by the search**" in card and "ranks did not hold at 8,192 tokens" in card


def test_a_supported_pick_is_pick_yaml_and_replaces_an_unsupported_one(tmp_path):
    from cuvee.card.chosen_by import chosen_by_lines
    from cuvee.mixsearch.report import pick_line, render_markdown

    (tmp_path / "pick.NOT-SUPPORTED.yaml").write_text("# an earlier look's\n")
    report = _report(verdicts={"docs": {"natural": _verdict("candidate better", 0.05)}})
    path = _write(report, tmp_path)
    assert path.name == "pick.yaml" and not (tmp_path / "pick.NOT-SUPPORTED.yaml").exists()
    text = path.read_text()
    assert text.startswith("# written by cuvee mix search") and "NOT SUPPORTED" not in text
    mix = yaml.safe_load(text)
    assert mix["name"] == "planted_pick" and mix["chosen_by"]["supported"] is True
    assert [s["weight"] for s in mix["sources"]] == [0.6, 0.4, 0.0]
    assert f"ready mix config `{path}`" in render_markdown(report)
    assert pick_line(report) == f"[search] pick supported: ready mix config {path} (report.md next to it)"
    assert "Supported by the search" in "\n".join(chosen_by_lines({"config": mix}))


def test_a_corner_pick_is_said_to_be_one():
    from cuvee.mixsearch.report import on_bounds

    fits = {"docs": {"chosen": "loglinear"}, "web": {"chosen": "ridge"}}
    names, lo, hi = ["a", "b", "c"], [0.0, 0.0, 0.05], [1.0, 0.8, 0.9]
    corner = on_bounds(names, [0.95, 0.0, 0.05], lo, hi, fits)
    assert corner["corner"] and corner["lower"] == ["b", "c"] and corner["upper"] == []
    assert corner["note"].startswith("The pick is a corner of the bounds (b, c at their lower bound)")
    assert "the chosen fit of docs is log-linear, monotone in every weight, and its optimum is always a corner" \
        in corner["note"]
    edge = on_bounds(names, [0.1, 0.8, 0.1], lo, hi, {"docs": {"chosen": "ridge"}})
    assert edge["corner"] is False and edge["upper"] == ["b"] and "log-linear" not in edge["note"]
    assert edge["note"] == "The pick sits on the bounds (b at its upper bound): the fitted optimum lies at or beyond them."
    assert on_bounds(names, [0.4, 0.3, 0.3], lo, hi, fits) is None


def test_progress_lines_are_rationed_by_time_and_their_eta_is_the_rate_so_far():
    from cuvee.mixsearch.progress import Ticker, timed

    now = [0.0]
    lines: list[str] = []
    ticker = Ticker(lines.append, "proxies", 10, every_s=10.0, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 4.0  # a job every 4 s: a line at most every 10 s, none after the last job
        ticker.step()
    assert lines == ["[search] proxies: 3/10, 12.0 s, ~28.0 s left", "[search] proxies: 6/10, 24.0 s, ~16.0 s left",
                     "[search] proxies: 9/10, 36.0 s, ~4.0 s left"]
    lines.clear()
    with timed(lines.append, "fitting docs", clock=lambda: now[0]):
        now[0] += 150.0
    assert lines == ["[search] fitting docs ...", "[search] fitting docs: done in 2 min 30 s"]
