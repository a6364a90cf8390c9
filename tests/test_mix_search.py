"""`cuvee mix search`: a planted search on real text, resume after kill -9, dry run, one-line refusals.

Planted: three sources of clearly different real text (English WCXB pages, German and Russian sentences from
the lingua fixtures), natural token shares about 0.57 / 0.21 / 0.22, and a held-out target drawn 10 % / 30 % /
60 % (bytes) from held-out parts of the three. From 16 proxies (the issue's N >= 16; with 8 the fits
extrapolate into corners no proxy saw) the search must pick weights closer (L1) to the planted blend than the
natural and uniform mixes are, and the pick must beat the natural mix with the verdict "better".
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from cuvee.cli import main

REPO = Path(__file__).resolve().parents[1]
LINGUA = REPO / "tests/fixtures/mixer_lingua"
WCXB = REPO / "data/curated/wcxb_dev_main_content.jsonl.gz"
PLANTED = {"en": 0.1, "de": 0.3, "ru": 0.6}
DOC_BYTES = 400


def _pieces(texts: list[str]) -> list[str]:
    """Texts joined and cut at spaces into documents of about DOC_BYTES bytes."""
    out, cur = [], []
    for word in " ".join(texts).split():
        cur.append(word)
        if len(" ".join(cur).encode()) >= DOC_BYTES:
            out.append(" ".join(cur))
            cur = []
    return out


def _write(path: Path, docs: list[str]) -> str:
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return str(path)


def _data(d: Path) -> dict:
    with gzip.open(WCXB, "rt", encoding="utf-8") as f:
        pages = [json.loads(line)["main_content"] or "" for line in f]
    en_src = _pieces(pages[:40])[:600]
    en_held = _pieces(pages[200:210])
    langs = {}
    for lang in ("de", "ru"):
        lines = (LINGUA / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        langs[lang] = (_pieces(lines[200:]), _pieces(lines[:200]))
    held = {"en": en_held, "de": langs["de"][1], "ru": langs["ru"][1]}
    target = []
    for lang, share in PLANTED.items():  # documents of ~equal bytes: counts in proportion to the planted shares
        target += [(lang, doc) for doc in held[lang][: int(round(share * 60))]]
    rng = np.random.default_rng(0)
    target = [target[i] for i in rng.permutation(len(target))]
    return {"en": _write(d / "en.jsonl", en_src), "de": _write(d / "de.jsonl", langs["de"][0]),
            "ru": _write(d / "ru.jsonl", langs["ru"][0]), "target": _write(d / "target.jsonl", [t for _, t in target])}


def _config(files: dict, **over) -> dict:
    cfg = {
        "name": "planted", "tokenizer": "bytes256.tiktoken", "seed": 0, "mixtures": 16,
        "sources": [{"name": n, "paths": files[n]} for n in ("en", "de", "ru")],
        "targets": [{"name": "blend", "paths": files["target"], "max_docs": 100, "max_doc_tokens": 1024}],
        "proxy": {"tokens": 512 * 50, "train": {
            "model": {"dim": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "max_seq_len": 64},
            "data": {"seq_len": 64}, "micro_batch": 8, "vocab_multiple": 1,
            "optim": {"lr": 5e-3, "warmup_steps": 3, "schedule": "cosine", "min_lr_ratio": 0.1}}},
        "proof": {"seeds": [0, 1, 2]}, "threads": 1,
    }
    cfg.update(over)
    return cfg


def _yaml(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The planted search, killed with SIGKILL after two proxies, then run again to the end (in process)."""
    from cuvee.mixsearch.search import run_search

    d = tmp_path_factory.mktemp("planted")
    files = _data(d)
    cfg_path = _yaml(d / "search.yaml", _config(files))
    out = d / "search"
    code = f"from cuvee.mixsearch.search import run_search; run_search({str(cfg_path)!r}, {str(out)!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not (out / "proxies" / "p001.json").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    killed_with = sorted(p.name for p in (out / "proxies").glob("p*.json"))
    report = run_search(cfg_path, out, say=lambda m: None)
    return {"dir": d, "cfg": cfg_path, "out": out, "report": report, "files": files, "killed_with": killed_with}


def _l1(w: dict) -> float:
    return sum(abs(w[k] - PLANTED[k]) for k in PLANTED)


@pytest.mark.slow
def test_planted_pick_is_closer_than_natural_and_uniform_and_better(searched):
    r = searched["report"]
    names = r["plan"]["sources"]
    pick = r["pick"]["weights"]
    natural = dict(zip(names, r["plan"]["natural"]))
    uniform = dict(zip(names, r["plan"]["uniform"]))
    assert _l1(pick) < _l1(uniform) < _l1(natural), (pick, natural, uniform)
    v = r["verdicts"]["blend"]["natural"]
    assert v["verdict"] == "candidate better", v
    assert v["effect"] > 0 and v["ci95"][0] > 0
    chosen = r["fits"]["blend"]["chosen"]
    assert r["fits"]["blend"]["fits"][chosen]["loo_spearman"] > 0.5
    # the pick is supported: a ready mix config with these weights, and no unsupported one beside it
    assert r["pick"]["supported"] and r["pick"]["mix_yaml"] == str(searched["out"] / "pick.yaml")
    assert not (searched["out"] / "pick.NOT-SUPPORTED.yaml").exists()
    mix = yaml.safe_load((searched["out"] / "pick.yaml").read_text())
    assert [s["weight"] for s in mix["sources"]] == pytest.approx([pick[n] for n in names], abs=1e-6)
    assert abs(sum(s["weight"] for s in mix["sources"]) - 1) < 1e-6
    # every proof arm read its weights over the steps it trained (pieces below the document level)
    for arm, runs in r["proof"].items():
        shares = runs["0"]["shares_trained"]
        want = dict(zip(names, r["proof"][arm]["0"]["weights"]))
        assert all(abs(shares[n] - want[n]) < 0.02 for n in names), (arm, shares, want)
    assert (searched["out"] / "report.md").read_text().count("candidate better") >= 1


@pytest.mark.slow
def test_resume_after_kill_trains_no_job_twice_and_rerun_gives_the_same_report(searched):
    out = searched["out"]
    assert searched["killed_with"][:2] == ["p000.json", "p001.json"]
    jobs = collections.Counter(json.loads(line)["job"] for line in (out / "events.jsonl").read_text().splitlines())
    expected = {f"p{i:03d}" for i in range(16)} | {f"{a}_seed{s}" for a in ("pick", "natural", "uniform")
                                                  for s in (0, 1, 2)}
    assert set(jobs) == expected and set(jobs.values()) == {1}, jobs
    before = {p: p.read_bytes() for p in (out / "report.json", out / "report.md", *out.glob("pick*.yaml"))}
    from cuvee.mixsearch.search import run_search

    run_search(searched["cfg"], out, say=lambda m: None)  # everything recorded: fits and report only
    assert len((out / "events.jsonl").read_text().splitlines()) == len(expected)
    assert {p: p.read_bytes() for p in before} == before


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


@pytest.mark.slow
def test_changed_search_file_is_refused(searched, capsys):
    changed = _yaml(searched["dir"] / "changed.yaml", {**_config(searched["files"]), "mixtures": 17})
    code, _, err = _cli(["mix", "search", str(changed), "--out", str(searched["out"])], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "mixtures" in err and "--fresh" in err


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    files = _data(tmp_path)
    out = tmp_path / "never"
    cfg = _yaml(tmp_path / "s.yaml", _config(files))
    code, text, _ = _cli(["mix", "search", str(cfg), "--dry-run", "--out", str(out)], capsys)
    assert code == 0
    assert "16 mixtures" in text and "per proxy: 25,600 tokens in 50 steps" in text and "estimated cost" in text
    assert "estimated time here, one job at a time: ~" in text and "from proxy steps timed on this machine" in text
    assert text.count("corner:") == 3 and "natural" in text
    assert not out.exists()
    demo = REPO / "mixes/search_demo.yaml"
    code, text, _ = _cli(["mix", "search", str(demo), "--dry-run", "--json", "--no-estimate"], capsys)
    plan = json.loads(text)
    assert code == 0 and len(plan["mixtures"]) == 10 and plan["proof_runs"] == 9 and "seconds" not in plan
    assert all(abs(sum(w) - 1) < 1e-9 for w in plan["mixtures"])


@pytest.mark.parametrize("change, expect", [
    ({"mixtures": 3}, "fewer than sources + 1"),
    ({"mixturs": 8}, "did you mean 'mixtures'"),
    ({"sources": "MIN"}, "min_weight values sum to 1.5 > 1"),
    ({"sources": "MAX"}, "max_weight values sum to 0.6 < 1"),
    ({"proxy": {"tokens": 10, "train": {"optim": {"lrr": 1}}}}, "did you mean 'lr'"),
])
def test_bad_search_configs_are_one_line(tmp_path, capsys, change, expect):
    files = {n: str(tmp_path / f"{n}.jsonl") for n in ("en", "de", "ru", "target")}
    cfg = _config(files)
    if change.get("sources") == "MIN":
        change = {"sources": [{**s, "min_weight": 0.5} for s in cfg["sources"]]}
    elif change.get("sources") == "MAX":
        change = {"sources": [{**s, "max_weight": 0.2} for s in cfg["sources"]]}
    cfg = {**cfg, **change}
    code, _, err = _cli(["mix", "search", str(_yaml(tmp_path / "bad.yaml", cfg)), "--dry-run"], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert expect in err, err


def test_epoch_caps_that_make_the_budget_impossible_are_refused(tmp_path, capsys):
    files = _data(tmp_path)
    cfg = _config(files)
    cfg["sources"] = [{**s, "max_epochs": 0.01, "min_weight": 0.3 if s["name"] == "de" else 0.0}
                      for s in cfg["sources"]]
    code, _, err = _cli(["mix", "search", str(_yaml(tmp_path / "caps.yaml", cfg)), "--dry-run"], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "epoch caps make the budget impossible for de" in err


def test_mix_search_is_a_subcommand_and_mix_config_still_works(tmp_path, capsys):
    """`cuvee mix search SEARCH.yaml` runs the search; any other first argument is still `cuvee mix CONFIG`."""
    code, text, _ = _cli(["mix", "--help"], capsys)
    assert code == 0 and "mix [OPTIONS] CONFIG" in text and "mix search [OPTIONS] SEARCH.yaml" in text
    assert "--dry-run" in text and "search" in text.split("Commands:")[1]
    code, text, _ = _cli(["mix", "search", "--help"], capsys)
    assert code == 0 and " mix search [OPTIONS] SEARCH.yaml" in text and "mix CONFIG search" not in text
    files = _data(tmp_path)
    mix = {"name": "m", "tokenizer": "bytes256.tiktoken", "target_tokens": 5000, "output_dir": str(tmp_path / "o"),
           "sources": [{"name": "en", "paths": files["en"], "weight": 0.5},
                       {"name": "de", "paths": files["de"], "weight": 0.5}]}
    code, text, _ = _cli(["mix", str(_yaml(tmp_path / "mix.yaml", mix)), "--dry-run"], capsys)
    assert code == 0 and "dry run: nothing tokenized" in text and not (tmp_path / "o").exists()
    code, _, err = _cli(["mix", str(tmp_path / "mix.yaml"), "extra"], capsys)
    assert code == 2 and "unexpected extra argument" in err
    code, _, err = _cli(["mix", "search"], capsys)
    assert code == 2 and "Missing argument 'SEARCH.yaml'" in err
    code, text, err = _cli(["mix", "search", str(_yaml(tmp_path / "s.yaml", _config(files))), "--dry-run",
                            "--no-estimate"], capsys)
    assert code == 0 and "estimated cost" in text and "estimated time" not in text
