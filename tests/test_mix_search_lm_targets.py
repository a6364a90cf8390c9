"""`cuvee mix search` targets named by an lm-evaluation-harness task: read offline from a local task YAML and a
local data file, each item's context + gold continuation one document, decontaminated against the sources,
refusals of bad targets in one line before any work, task code refused unless allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cuvee.cli import main

REPO = Path(__file__).resolve().parents[1]
LINGUA = REPO / "tests/fixtures/mixer_lingua"
QUESTIONS = [f"Which material is item number {i} of the inventory made of, according to the ledger?" for i in range(12)]
CHOICES = ["wood", "stone", "glass"]


def _task(d: Path, extra: str = "", rows: list[dict] | None = None) -> Path:
    rows = rows if rows is not None else [{"question": q, "choices": CHOICES, "label": i % 3}
                                          for i, q in enumerate(QUESTIONS)]
    (d / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = d / "qa.yaml"
    path.write_text("task: local_qa\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: qa.jsonl\n"
                    "test_split: test\noutput_type: multiple_choice\n"
                    'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: "{{choices}}"\n'
                    'doc_to_target: "{{label}}"\n' + extra)
    return path


def _sources(d: Path) -> dict:
    out = {}
    for lang in ("de", "ru"):
        lines = (LINGUA / f"{lang}.txt").read_text(encoding="utf-8").splitlines()[:300]
        docs = [" ".join(lines[i:i + 4]) for i in range(0, len(lines), 4)]
        if lang == "de":  # one task item, verbatim, inside a source: it must not be scored
            docs.append(f"Question: {QUESTIONS[4]}\nAnswer: stone")
        (d / f"{lang}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
        out[lang] = str(d / f"{lang}.jsonl")
    return out


def _config(d: Path, target: dict, **over) -> dict:
    src = _sources(d)
    return {"name": "lmt", "tokenizer": "bytes256.tiktoken", "seed": 0, "mixtures": 3,
            "sources": [{"name": n, "paths": p} for n, p in src.items()], "targets": [target],
            "proxy": {"tokens": 64 * 8 * 6, "train": {
                "model": {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "max_seq_len": 64},
                "data": {"seq_len": 64}, "micro_batch": 8, "vocab_multiple": 1,
                "optim": {"lr": 5e-3, "warmup_steps": 1, "schedule": "cosine", "min_lr_ratio": 0.1}}},
            "proof": {"enabled": False}, "threads": 1, **over}


def _yaml(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def test_items_are_context_and_gold_continuation_and_bad_items_are_counted(tmp_path):
    from cuvee.evaltasks.render import render_items as render
    from cuvee.mixsearch.config import Target

    rows = [{"question": q, "choices": CHOICES, "label": i % 3} for i, q in enumerate(QUESTIONS[:4])]
    rows.append({"question": "Broken gold?", "choices": CHOICES, "label": 7})  # no choice 7: counted, not fatal
    t = Target(name="qa", lm_eval=str(_task(tmp_path, rows=rows)), limit=10)
    texts, counts = render(t.task, False, t.pool, say=lambda m: None)
    assert texts[:2] == [f"Question: {QUESTIONS[0]}\nAnswer: wood", f"Question: {QUESTIONS[1]}\nAnswer: stone"]
    assert counts == {"read": 5, "kept": 4, "dropped": {"render_error": 1}}
    short, c = render(t.task, False, 2, say=lambda m: None)
    assert short == texts[:2] and c["read"] == 2
    assert t.as_mix_source().paths == [str((tmp_path / "qa.yaml").resolve()), str((tmp_path / "qa.jsonl").resolve())]


@pytest.mark.parametrize("target, expect", [
    ({"lm_evl": "QA"}, "unknown key 'lm_evl'; did you mean 'lm_eval'?"),
    ({"lm_eval": "arc_easy_locl"}, "unknown task 'arc_easy_locl'; did you mean 'arc_easy_local'"),
    ({"lm_eval": "QA", "split": "validation"}, "split 'validation' not among its data_files"),
    ({"lm_eval": "QA", "paths": "x.jsonl"}, "paths do not apply"),
    ({"lm_eval": "QA", "max_docs": 5}, "max_docs do not apply (the pool size is limit)"),
    ({"paths": "DE", "limit": 5}, "limit apply only to lm_eval targets"),
    ({"lm_eval": "MISSING"}, "missing.jsonl not found"),
    ({"lm_eval": "CODE"}, "runs no code from task files unless"),
])
def test_bad_lm_eval_targets_are_one_line_before_any_work(tmp_path, capsys, target, expect):
    qa = _task(tmp_path)
    (tmp_path / "missing.yaml").write_text(qa.read_text().replace("qa.jsonl", "missing.jsonl"))
    (tmp_path / "code.yaml").write_text(qa.read_text() + "process_docs: !function utils.shout\n")
    swap = {"QA": str(qa), "MISSING": str(tmp_path / "missing.yaml"), "CODE": str(tmp_path / "code.yaml")}
    cfg = _config(tmp_path, {"name": "qa", **{k: swap.get(v, v) for k, v in target.items()}})
    cfg["targets"][0] = {k: (cfg["sources"][0]["paths"] if v == "DE" else v) for k, v in cfg["targets"][0].items()}
    out = tmp_path / "out"
    code, _, err = _cli(["mix", "search", str(_yaml(tmp_path / "bad.yaml", cfg)), "--out", str(out)], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert expect in err and "Traceback" not in err, err
    assert not out.exists()


def test_task_code_runs_only_when_the_target_allows_it(tmp_path):
    from cuvee.evaltasks.render import render_items as render
    from cuvee.mixsearch.config import SearchConfigError, Target, load_search_config

    path = tmp_path / "code.yaml"
    path.write_text(_task(tmp_path).read_text() + "process_docs: !function utils.shout\n")
    (tmp_path / "utils.py").write_text("def shout(ds):\n    return ds.map(lambda d: {'question': d['question'].upper()})\n")
    with pytest.raises(SearchConfigError, match="utils.py"):
        load_search_config(_config(tmp_path, {"name": "qa", "lm_eval": str(path)}))
    t = Target(name="qa", lm_eval=str(path), allow_task_code=True, limit=1)
    said = []
    texts, _ = render(t.task, True, 1, say=said.append)
    assert texts == [f"Question: {QUESTIONS[0].upper()}\nAnswer: wood"]
    assert any("--allow-task-code" in s and "utils.py" in s for s in said)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    from cuvee.mixsearch.search import run_search

    d = tmp_path_factory.mktemp("lmt")
    cfg = _config(d, {"name": "qa", "lm_eval": str(_task(d)), "limit": 10, "weight": 0.5})
    path = _yaml(d / "search.yaml", cfg)
    report = run_search(path, d / "out", say=lambda m: None)
    return {"dir": d, "cfg": path, "report": report, "out": d / "out"}


def test_a_search_scores_the_task_items_decontaminated(searched):
    r, out = searched["report"], searched["out"]
    items = (out / "cache" / "qa.items.jsonl").read_text().splitlines()
    assert len(items) == 10 and json.loads(items[4])["text"] == f"Question: {QUESTIONS[4]}\nAnswer: stone"
    dec = r["decontamination"]["targets"]["qa"]
    assert dec["pool"] == 10 and len(dec["kept"]) == 9 and 4 not in dec["kept"], dec  # item 4 is in source de
    assert dec["exact_overlap"] + dec["near_overlap"] + dec.get("contained_overlap", 0) == 1
    meta = json.loads((out / "cache" / "qa.json").read_text())
    assert meta["lm_eval"]["task"] == "local_qa" and meta["lm_eval"]["read"] == 10 and meta["documents"] == 10
    assert all(p["targets"]["qa"]["value"] > 0 for p in r["proxies"])
    assert r["fits"]["qa"]["permutation"]["permutations"] == 200


def test_a_changed_task_file_is_refused_on_rerun(searched, capsys):
    qa = searched["dir"] / "qa.yaml"
    qa.write_text(qa.read_text().replace("Answer:", "A:"))
    code, _, err = _cli(["mix", "search", str(searched["cfg"]), "--out", str(searched["out"])], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"input {qa} changed" in err and "--fresh" in err, err  # named by path, as every input change is


def test_the_report_names_the_task(searched):
    md = (searched["out"] / "report.md").read_text()
    assert "qa (weight 0.5, lm-eval task `" in md and "qa.yaml`, each item's context and gold answer scored)" in md
    assert "| qa | " in md and "Permutation test of the choice" in md
