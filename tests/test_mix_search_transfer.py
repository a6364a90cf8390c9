"""The search's transfer check on a tiny setting: the best and worst proxies trained again at a larger budget,
the rank correlation between budgets reported; a rerun trains nothing; a budget past the epoch caps is refused
before any proxy trains."""

from __future__ import annotations

import json
import re
import time

import pytest

from test_mix_search import _cli, _config, _data, _yaml


def _tiny(files: dict, **over) -> dict:
    cfg = _config(files, mixtures=5, proof={"seeds": [0, 1], "enabled": False},
                  transfer={"top_k": 2, "bottom_k": 2, "tokens": 512 * 16})
    cfg["proxy"]["tokens"] = 512 * 8
    cfg["targets"][0]["max_docs"] = 20
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from cuvee.mixsearch.search import run_search

    d = tmp_path_factory.mktemp("transfer")
    files = _data(d)
    cfg = _yaml(d / "s.yaml", _tiny(files))
    lines: list[str] = []
    t0 = time.perf_counter()
    report = run_search(cfg, d / "out", say=lines.append)
    return {"d": d, "cfg": cfg, "out": d / "out", "report": report, "files": files, "lines": lines,
            "wall_s": time.perf_counter() - t0}


def test_transfer_retrains_best_and_worst_at_the_larger_budget(tiny):
    r, out = tiny["report"], tiny["out"]
    t = r["transfer"]
    assert t["top_k"] == 2 and t["bottom_k"] == 2 and len(t["mixtures"]) == 4
    assert t["proxy_tokens"] == 512 * 8 and t["transfer_tokens"] == 512 * 16
    measured = [r["proxies"][i]["targets"]["blend"]["value"] for i in t["mixtures"]]
    assert measured[:2] == sorted(measured)[:2] and measured[2:] == sorted(measured)[2:]  # best two, worst two
    for i in t["mixtures"]:
        rec = json.loads((out / "transfer" / f"p{i:03d}_{512 * 16}.json").read_text())
        assert rec["tokens"] == 512 * 16 and rec["weights"] == r["plan"]["mixtures"][i]
    row = t["targets"]["blend"]
    assert row["proxy_budget"] == pytest.approx(measured)
    assert -1 <= row["spearman"] <= 1 and 0 <= row["pairs_same_order"] <= 1
    assert t["verdict"] in ("ranks held", "ranks partly held", "ranks did not hold")
    md = (out / "report.md").read_text()
    assert "## Transfer check" in md and t["verdict"] in md
    assert {"top_weights.png", "source_effect.png", "predicted_vs_measured.png"} <= set(r["plots"])
    assert all((out / p).stat().st_size > 1000 for p in r["plots"])


def test_rerun_trains_nothing_and_another_transfer_budget_trains_only_the_transfers(tiny):
    from cuvee.mixsearch.search import run_search

    out = tiny["out"]
    events = (out / "events.jsonl").read_text().splitlines()
    assert len(events) == 5 + 4
    run_search(tiny["cfg"], out, say=lambda m: None)
    assert (out / "events.jsonl").read_text().splitlines() == events
    bigger = _yaml(tiny["d"] / "s3.yaml", _tiny(tiny["files"], transfer={"top_k": 1, "bottom_k": 1,
                                                                          "tokens": 512 * 24}))
    r = run_search(bigger, out, say=lambda m: None)
    new = [json.loads(x)["job"] for x in (out / "events.jsonl").read_text().splitlines()[len(events):]]
    assert sorted(new) == sorted(f"p{i:03d}_{512 * 24}" for i in r["transfer"]["mixtures"])


def test_transfer_budget_past_the_epoch_caps_is_refused_before_training(tmp_path, capsys):
    files = _data(tmp_path)
    cfg = _yaml(tmp_path / "s.yaml", _tiny(files, transfer={"top_k": 1, "bottom_k": 1, "tokens": 10**9}))
    code, _, err = _cli(["mix", "search", str(cfg), "--out", str(tmp_path / "o")], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "transfer.tokens 1,000,000,000 would read past max_epochs for en" in err
    assert not (tmp_path / "o" / "proxies").exists()


def test_transfer_asking_for_more_mixtures_than_there_are_is_one_line(tmp_path, capsys):
    files = _data(tmp_path)
    cfg = _yaml(tmp_path / "s.yaml", _tiny(files, transfer={"top_k": 3, "bottom_k": 3, "tokens": 8192}))
    code, _, err = _cli(["mix", "search", str(cfg), "--dry-run"], capsys)
    assert code == 1 and "top_k + bottom_k = 6 is more than the 5 mixtures" in err


def test_pick_yaml_carries_chosen_by_and_the_card_shows_it_escaped(tiny, tmp_path):
    import yaml

    from cuvee.card.chosen_by import chosen_by_lines
    from cuvee.mixer.mix import run_mix

    r, out = tiny["report"], tiny["out"]
    path = out / ("pick.yaml" if r["pick"]["supported"] else "pick.NOT-SUPPORTED.yaml")
    assert r["pick"]["mix_yaml"] == str(path) and len(list(out.glob("pick*.yaml"))) == 1
    pick = yaml.safe_load(path.read_text())
    cb = pick["chosen_by"]
    assert cb["supported"] is r["pick"]["supported"] and cb["not_supported_because"] == r["pick"]["not_supported_because"]
    chosen = r["fits"]["blend"]["chosen"]
    assert cb["search"] == "planted" and cb["report"] == str((out / "report.md").resolve())
    assert cb["fits"]["blend"] == {"fit": chosen, "loo_spearman": r["fits"]["blend"]["fits"][chosen]["loo_spearman"],
                                   "loo_rmse": r["fits"]["blend"]["fits"][chosen]["loo_rmse"], "proxies": 5,
                                   "permutation_p": r["fits"]["blend"]["permutation"]["p_value"]}
    assert cb["proof"] == "not run" and cb["transfer"] == r["transfer"]["verdict"]
    manifest = run_mix(path, out_dir=tmp_path / "mix", dry_run=True)  # the mixer reads it as is
    md = "\n".join(chosen_by_lines(manifest))
    assert "### How these weights were chosen" in md and f"`{chosen}`" in md and "Proof: not run." in md
    assert f"{cb['fits']['blend']['loo_spearman']:.3f}" in md
    assert chosen_by_lines({"config": {"name": "plain"}}) == []
    hostile = {"config": {"chosen_by": {"search": "<script>x</script>", "fits": {"t|x": {"fit": "`a`", "loo_spearman":
               "<b>1</b>", "loo_rmse": float("nan"), "proxies": 3}}, "proof": {"t": {"natural": {
               "verdict": "<img src=x onerror=alert(1)>", "metric": "bpb", "effect": "x", "ci95": [0.1, "<i>"]}}},
               "transfer": "**held**"}}}
    md = "\n".join(chosen_by_lines(hostile))
    assert "<script>" not in md and "<img" not in md and "<b>" not in md and "<i>" not in md and "**held**" not in md
    assert "t\\|x" in md or "t&#124;x" in md
    assert chosen_by_lines({"config": {"chosen_by": ["a"]}})[-1].startswith("The mix config's `chosen_by` is not")


@pytest.mark.slow
def test_kill_during_fitting_then_rerun_trains_nothing_again_and_gives_the_same_pick(tiny, tmp_path):
    """SIGKILL once every proxy is recorded and before any transfer run starts (the search is fitting and
    picking then); the same command finishes without training a proxy twice, with the uninterrupted pick."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from cuvee.mixsearch.search import run_search

    out = tmp_path / "out"
    code = f"from cuvee.mixsearch.search import run_search; run_search({str(tiny['cfg'])!r}, {str(out)!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not (out / "proxies" / "p004.json").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not (out / "transfer").exists() and not (out / "report.json").exists()  # killed while fitting
    r = run_search(tiny["cfg"], out, say=lambda m: None)
    jobs = [json.loads(x)["job"] for x in (out / "events.jsonl").read_text().splitlines()]
    assert sorted(jobs) == sorted({*(f"p{i:03d}" for i in range(5)),
                                   *(f"p{i:03d}_{512 * 16}" for i in r["transfer"]["mixtures"])}), jobs
    assert r["pick"]["weights"] == tiny["report"]["pick"]["weights"]
    assert r["fits"] == tiny["report"]["fits"] and r["transfer"]["targets"] == tiny["report"]["transfer"]["targets"]


PHASES = ("tokenizing en", "decontaminating", "proxies: 5 of 5 job(s) to train", "fitting blend",
          "permutation test of blend", "transfer: 4 of 4 job(s) to train", "writing report.md")


def test_every_phase_of_the_search_says_when_it_starts_and_how_long_it_took(tiny):
    """Issue #37: the search printed nothing while it decontaminated, fitted and ran the permutation test."""
    lines = tiny["lines"]
    for what in PHASES:
        start = next((i for i, x in enumerate(lines) if x.startswith(f"[search] {what}") and x.endswith(" ...")), None)
        assert start is not None, (what, lines)
        if what.startswith("tokenizing"):
            assert re.fullmatch(r"\[search\] tokenized en: .* in \d+\.\d s", lines[start + 1]), lines[start + 1]
            continue
        end = next((x for x in lines[start + 1:] if x.startswith(f"[search] {what}") and ": done in " in x), None)
        assert end is not None and re.search(r": done in (\d+\.\d s|\d+ min \d\d s)$", end), (what, lines)


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(?:(\d+) min (\d\d) s|(\d+\.\d) s)", text)
    return float(m.group(3)) if m.group(3) else 60 * int(m.group(1)) + int(m.group(2))


def _took(lines: list[str], what: str) -> float:
    return sum(_seconds(x.rsplit(": done in ", 1)[1]) for x in lines
               if x.startswith(f"[search] {what}") and ": done in " in x)


def test_the_dry_run_estimate_is_within_a_factor_of_three_of_the_real_run(tiny):
    """--dry-run times a few real proxy steps and one refit per fit family here. On the tiny search (5 proxies of 8
    steps, 4 transfer runs of 16) its seconds per proxy and per transfer run are within 3x of the median the
    job records measured, and what the fitting and permutation phases took (their "done in" lines) is within 3x
    of its range for the fits (losses that follow a law .. noise: the fits' cost depends on the losses). The
    start-up a process pays once is left out here: this process already paid it."""
    import statistics

    from cuvee.mixsearch.config import load_search_config
    from cuvee.mixsearch.proxies import steps_for
    from cuvee.mixsearch.search import dry_run

    plan = dry_run(tiny["cfg"])
    est, out = plan["seconds"], tiny["out"]
    assert est["proof"] == 0 and est["per_step_s"] > 0 and est["fixed_per_run_s"] > 0 and est["startup"] >= 0
    for phase, runs, pattern in (("proxies", 5, "p???.json"), ("transfer", 4, f"p???_{512 * 16}.json")):
        walls = [json.loads(p.read_text())["wall_s"] for p in sorted((out / phase).glob(pattern))]
        assert len(walls) == runs
        per_run = est[phase] / runs
        assert statistics.median(walls) / 3 <= per_run <= 3 * statistics.median(walls), (phase, est, walls)
    steps = json.loads((out / "proxies" / "p000.json").read_text())["steps"]
    assert est["proxies"] / 5 == pytest.approx(est["fixed_per_run_s"] + steps * est["per_step_s"])
    fits = _took(tiny["lines"], "fitting ") + _took(tiny["lines"], "permutation test ")
    assert est["fits_law"] / 3 <= fits <= 3 * est["fits"], (est, fits)  # within 3x of the range noise .. law
    assert est["fits_law"] < est["fits"]
    assert steps == steps_for(load_search_config(tiny["cfg"])[1], 512 * 8) == 8
