"""The ``decontaminate`` stage in a real ``cuvee run`` (2 tasks): the index built once, items found in real WCXB
pages with planted cloze items, each action's effect and counts, stats.json's contamination section, the card's
table; eval sets from local files and from lm-eval task YAMLs resolved offline; bad configs refused in one line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cuvee.pipeline.recipe import RecipeError, parse_recipe

REPO = Path(__file__).resolve().parents[1]
CLOZE = REPO / "cuvee" / "assets" / "eval_tasks" / "cuvee_wcxb_cloze.jsonl"
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
PLANTED = {10: "verbatim", 50: "long", 90: "split", 130: "edited"}
QA = [{"qid": f"q{i}", "question": q, "answer": {"text": a}} for i, (q, a) in enumerate([
    ("Which gas do plants absorb from the air during photosynthesis according to the standard biology textbook",
     "carbon dioxide"),
    ("What is the capital of France", "Paris"),  # too short to test: 7 words
])]


def gold(it: dict) -> str:
    return it["context"] + " " + it["choices"][it["label"]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decont")
    items = [json.loads(line) for line in CLOZE.read_text().splitlines()]
    with gzip.open(WCXB, "rt") as f:
        rows = [json.loads(line) for line in f]
    from cuvee.train.demo_data import split_heldout

    pages = [r["main_content"] for r in split_heldout(rows)[0] if r["main_content"]][:40]
    docs = [{"id": f"page{i}", "text": t} for i, t in enumerate(pages)]
    long_page = max(pages, key=len)
    cut = long_page.find("\n", len(long_page) // 2)
    words = gold(items[90]).split(" ")
    third = len(words) // 3
    planted = {
        "verbatim": gold(items[10]),
        "long": long_page[:cut] + "\n" + gold(items[50]) + long_page[cut:],
        "split": "Notes.\n\n" + " ".join(words[:third]) + "\n" + " ".join(words[third:2 * third]) + "\n\n"
                 + " ".join(words[2 * third:]) + "\n\nThe end of the notes.",
        "edited": gold(items[130]).upper().replace(",", "").replace(".", " ;"),
        "qa": "Quiz time.\n" + QA[0]["question"] + "? " + QA[0]["answer"]["text"] + ".\nWhat is the capital of "
              "France? Paris, of course.",
        "short": "Here is an unrelated sentence with a fragment: " + " ".join(gold(items[170]).split()[:8]) + ".",
    }
    docs += [{"id": f"planted_{k}", "text": v} for k, v in planted.items()]
    for part in (0, 1):  # two files: each of the 2 tasks reads one
        (tmp / "in").mkdir(exist_ok=True)
        (tmp / "in" / f"{part}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[part::2]))
    (tmp / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QA))
    return {"tmp": tmp, "docs": docs, "items": items, "pages": pages}


def recipe(corpus, action: str, name: str) -> dict:
    tmp = corpus["tmp"]
    return {"name": name, "run_dir": str(tmp / name), "input": {"paths": [str(tmp / "in")], "format": "jsonl"},
            "stages": [{"stage": "decontaminate", "action": action, "eval_sets": [
                {"task": "cuvee_wcxb_cloze", "fields": ["context", "choices[label]"]},
                {"name": "my_qa", "path": str(tmp / "qa.jsonl"), "fields": ["question", "answer.text"],
                 "id_field": "qid"}]}],
            "output": {"format": "jsonl"}, "executor": {"kind": "local", "tasks": 2}}


def outputs(stats: dict) -> dict[str, dict]:
    from cuvee.pipeline.io import iter_documents

    return {d.id: {"text": d.text, "metadata": d.metadata} for d in iter_documents(stats["output"]["files"])}


def baseline(corpus) -> set[str]:
    """Unplanted pages that really share a 13-gram with a cloze item (site boilerplate): the same index finds them
    in every run, so they are expected, not planted."""
    from cuvee.dedup.ngram_match import NgramIndex, word_ids

    index = NgramIndex.build([word_ids(gold(it)) for it in corpus["items"]])
    return {f"page{i}" for i, t in enumerate(corpus["pages"]) if index.find(word_ids(t))}


@pytest.fixture(scope="module")
def dropped(corpus):
    from cuvee.pipeline.runner import run_recipe

    return run_recipe(recipe(corpus, "drop", "drop"), fresh=True)


def test_drop_run_builds_the_index_once_and_drops_every_planted_case(corpus, dropped):
    (phase,) = dropped["phases"]
    assert phase["name"] == "00.decontaminate.eval_index" and phase["tasks_done"] == 1
    assert phase["counters"]["index_builds"] == 1
    assert phase["counters"]["items_cuvee_wcxb_cloze"] == 400 and phase["counters"]["items_my_qa"] == 2
    assert phase["counters"]["too_short_my_qa"] == 1
    assert len(list((corpus["tmp"] / "drop" / "work" / "00_decontaminate" / "found").glob("*.u32"))) == 2  # 2 tasks
    kept = outputs(dropped)
    gone = {d["id"] for d in corpus["docs"]} - set(kept)
    expected = {f"planted_{k}" for k in ("verbatim", "long", "split", "edited", "qa")} | baseline(corpus)
    assert gone == expected and "planted_short" in kept
    stage = dropped["stages"][1]
    assert stage["dropped"] == {"contaminated": len(expected)}
    assert dropped["accounting"]["balanced"]
    (rep,) = dropped["contamination"]
    assert rep["stage"] == "00.decontaminate" and rep["action"] == "drop" and rep["n_grams"] == 13
    qa = rep["benchmarks"]["my_qa"]
    assert qa == {"items_checked": 2, "too_short": 1, "unreadable": 0, "items_found": 1, "documents_touched": 1,
                  "matches": 1}
    cloze = rep["benchmarks"]["cuvee_wcxb_cloze"]
    assert cloze["items_checked"] == 400 and cloze["too_short"] == 0
    assert cloze["documents_touched"] == len(expected) - 1 == stage["counters"]["contaminated_cuvee_wcxb_cloze"]
    assert cloze["items_found"] >= 4 and cloze["matches"] >= cloze["items_found"]


def test_card_shows_the_per_benchmark_table(corpus, dropped):
    from cuvee.card import write_card

    out = corpus["tmp"] / "card"
    write_card(corpus["tmp"] / "drop", out_dir=out, max_token_docs=0)
    text = (out / "README.md").read_text()
    section = text[text.index("## Contamination"):].split("\n## ", 1)[0]
    assert "No decontamination stage ran" not in section
    row = next(line for line in section.splitlines() if line.startswith("| `my_qa`"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["`my_qa`", "2", "1", "1", "1", "`drop`"]


def test_remove_cuts_the_paragraphs_and_annotate_keeps_the_text(corpus):
    from cuvee.pipeline.runner import run_recipe

    removed = outputs(run_recipe(recipe(corpus, "remove", "remove"), fresh=True))
    split = next(d["text"] for d in corpus["docs"] if d["id"] == "planted_split")
    assert removed["planted_split"]["text"] == "Notes.\n\nThe end of the notes."  # the 3 item lines, not the rest
    assert "planted_verbatim" not in removed  # nothing left but the item: dropped, counted
    qa = removed["planted_qa"]["text"]
    assert "photosynthesis" not in qa and "capital of France" in qa  # the short item stays
    report = json.loads(removed["planted_split"]["metadata"]["contamination"])
    # item 90, and any item of the same page whose context overlaps it by 13+ words
    assert ("cuvee_wcxb_cloze", corpus["items"][90]["id"]) in [(r["benchmark"], r["item"]) for r in report]
    assert {r["item"].split("-")[0] for r in report} == {corpus["items"][90]["id"].split("-")[0]}
    (a, b), = next(r["spans"] for r in report if r["item"] == corpus["items"][90]["id"])
    assert split[a:b].startswith(gold(corpus["items"][90]).split(" ")[0])

    stats = run_recipe(recipe(corpus, "annotate", "annotate"), fresh=True)
    kept = outputs(stats)
    assert len(kept) == len(corpus["docs"]) and kept["planted_split"]["text"] == split
    flagged = {i for i, d in kept.items() if d["metadata"].get("contamination")}
    assert {f"planted_{k}" for k in ("verbatim", "long", "split", "edited", "qa")} <= flagged
    assert "planted_short" not in flagged
    assert stats["stages"][1]["counters"]["documents_annotated"] == len(flagged)


# ---- eval sets and config ------------------------------------------------------------------------------------
def _stage(**kw) -> dict:
    return {"name": "x", "input": {"paths": ["data/sample"]}, "stages": [{"stage": "decontaminate", **kw}]}


def test_config_errors_are_one_line_with_did_you_mean():
    with pytest.raises(RecipeError, match=r"eval_sets\[0\]\.feilds: unknown key; did you mean 'fields'"):
        parse_recipe(_stage(eval_sets=[{"path": str(CLOZE), "feilds": ["context"]}]))
    with pytest.raises(RecipeError, match="exactly one of path"):
        parse_recipe(_stage(eval_sets=[{"path": str(CLOZE), "task": "cuvee_wcxb_cloze"}]))
    with pytest.raises(RecipeError, match="action"):
        parse_recipe(_stage(action="delete", eval_sets=[{"path": str(CLOZE)}]))


def _build_error(tmp_path, **kw) -> str:
    from cuvee.pipeline.compiler import compile_recipe

    r = parse_recipe({**_stage(**kw), "run_dir": str(tmp_path / "run")})
    with pytest.raises(RecipeError) as e:
        compile_recipe(r)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_missing_local_copies_and_fields_fail_before_work(tmp_path, monkeypatch):
    monkeypatch.delenv("CUVEE_EVAL_DATA", raising=False)
    msg = _build_error(tmp_path, eval_sets=[{"task": "hellaswag_local"}])
    assert "needs $CUVEE_EVAL_DATA, which is not set" in msg and "nothing is downloaded" in msg
    monkeypatch.setenv("CUVEE_EVAL_DATA", str(tmp_path / "evals"))
    msg = _build_error(tmp_path, eval_sets=[{"task": "arc_easy_local"}])
    assert f"local data file {tmp_path / 'evals' / 'arc_easy' / 'test.jsonl'} not found" in msg
    msg = _build_error(tmp_path, eval_sets=[{"task": "hellaswag"}])
    assert "did you mean 'hellaswag_local'" in msg
    msg = _build_error(tmp_path, eval_sets=[{"path": str(CLOZE), "fields": ["contxt"]}])
    assert "field 'contxt' is not in its first record; did you mean 'context'" in msg
    assert not (tmp_path / "run").exists()


def test_lm_eval_task_from_a_local_copy(tmp_path, monkeypatch):
    """A FineWeb early-signal template reads the user's local ARC copy; its prompt's fields make the item text."""
    from cuvee.evaltasks import items as eval_items

    arc = tmp_path / "evals" / "arc_easy"
    arc.mkdir(parents=True)
    row = {"id": "Mercury_1", "question": "Which of these is a renewable resource that can be replaced within a "
           "human lifetime?", "choices": {"text": ["coal", "wood"], "label": ["A", "B"]}, "answerKey": "B"}
    (arc / "test.jsonl").write_text(json.dumps(row) + "\nnot json\n")
    monkeypatch.setenv("CUVEE_EVAL_DATA", str(tmp_path / "evals"))
    src = eval_items.resolve(None, None, "arc_easy_local", None, None)
    assert src.name == "arc_easy_local" and src.fields == ("question", "choices.text")
    assert list(eval_items.items(src)) == [("Mercury_1", row["question"] + " coal wood"), ("1", None)]
    gold_src = eval_items.resolve("arc", None, "arc_easy_local", ["question", "choices.text[answerKey]"], None)
    assert next(eval_items.items(gold_src))[1].endswith("lifetime? wood")
    # hellaswag's prompt is made by code (process_docs): every string of the raw record is checked instead
    hs = tmp_path / "evals" / "hellaswag"
    hs.mkdir()
    (hs / "validation.jsonl").write_text(json.dumps({"ctx_a": "A man sits.", "endings": ["He stands."]}) + "\n")
    src = eval_items.resolve(None, None, "hellaswag_local", None, None)
    assert src.fields is None and next(eval_items.items(src))[1] == "A man sits. He stands."


def test_parquet_and_text_eval_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cuvee.evaltasks import items as eval_items

    pq.write_table(pa.table({"q": ["one two"], "a": ["three"]}), tmp_path / "e.parquet")
    src = eval_items.resolve(None, str(tmp_path / "e.parquet"), None, ["q", "a"], None)
    assert src.name == "e" and list(eval_items.items(src)) == [("0", "one two three")]
    (tmp_path / "t.txt").write_text("first item\nsecond item\n")
    assert list(eval_items.items(eval_items.resolve("t", str(tmp_path / "t.txt"), None, None, None))) == [
        ("0", "first item"), ("1", "second item")]


def test_cli_validate_names_the_problem_in_one_line(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("name: x\ninput: {paths: [data/sample]}\nstages:\n  - stage: decontaminate\n    eval_sets:\n"
                 "      - task: no_such_task\n")
    p = subprocess.run([sys.executable, "-m", "cuvee.cli", "validate", str(r)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "unknown task 'no_such_task'" in p.stderr


def test_fineweb_recipe_example_is_a_valid_stage(tmp_path, monkeypatch):
    """The commented block in recipes/fineweb.yaml, uncommented: the shipped cloze task builds as is; the
    early-signal templates without local copies stop in one line naming $CUVEE_EVAL_DATA."""
    import yaml

    text = (REPO / "recipes" / "fineweb.yaml").read_text()
    block = text[text.index("  # - stage: decontaminate"):text.index("\noutput:")]
    stage = yaml.safe_load("\n".join(line.replace("  # ", "  ", 1) for line in block.splitlines()))[0]
    sets = stage["eval_sets"]
    assert [e.get("task") for e in sets[:3]] == ["cuvee_wcxb_cloze", "hellaswag_local", "arc_easy_local"]
    monkeypatch.delenv("CUVEE_EVAL_DATA", raising=False)
    from cuvee.pipeline.compiler import compile_recipe

    base = {"name": "x", "input": {"paths": ["data/sample"]}, "run_dir": str(tmp_path / "run")}
    jobs = compile_recipe(parse_recipe({**base, "stages": [{**stage, "eval_sets": sets[:1]}]}))
    assert [j.name for j in jobs] == ["seg00", "00.decontaminate.eval_index", "seg01"]
    assert "needs $CUVEE_EVAL_DATA" in _build_error(tmp_path, **{k: v for k, v in stage.items() if k != "stage"})
