"""`cuvee rephrase` and `cuvee classify annotate` against answers and inputs that are not valid Unicode, and the
`--where` rule they share with `cuvee mix` (issue #37). All real: cuvee's OpenAI-compatible server on 127.0.0.1
(its JSON escapes a lone surrogate as ``\\ud800``, as a hostile or broken server would send it), real files."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.classifiers.llm_server import serve
from cuvee.cli import main as cuvee_main
from cuvee.rephrase.cli import load_style

BAD = "BAD-ANSWER"  # a document holding this gets an answer with a lone surrogate
TEXTS = [f"Document {i} tells of the river, the valley and the harbour town number {i}." for i in range(5)]


def reverse_words(prompt: str, max_tokens: int, chat: bool = True):
    """A rewrite that passes rephrase's checks (the document's words in reverse order), or, for a document holding
    BAD, an answer with a lone surrogate."""
    doc = load_style("wikipedia").extract(prompt) or ""
    text = "Educational score: 3 \ud800 broken" if BAD in prompt else " ".join(reversed(doc.split()))
    return text, len(prompt.split()), len(text.split())


def write_run(root: Path, docs: list[dict]) -> Path:
    (root / "output").mkdir(parents=True)
    (root / "stats.json").write_text("{}")
    with open(root / "output" / "part.jsonl", "w") as f:  # json.dumps escapes a lone surrogate as \ud800
        f.writelines(json.dumps(d) + "\n" for d in docs)
    return root


def rephrase(run: Path, out: Path, srv, *extra):
    return CliRunner().invoke(cuvee_main, ["rephrase", str(run), "--out", str(out), "--prompt", "wikipedia", "--model", "m",
                                           "--endpoint", srv.url, "--max-input-tokens", "0", "--retries", "0", *extra])


def annotate(run: Path, out: Path, srv, *extra):
    return CliRunner().invoke(cuvee_main, ["classify", "annotate", str(run), "--endpoint", srv.url, "--model", "m", "--n", "10",
                                         "--out", str(out), "--retries", "0", "--no-progress", *extra])


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().decode("utf-8").splitlines()]  # strict UTF-8: fails on a surrogate


def test_rephrase_drops_an_answer_with_a_lone_surrogate_and_resumes(tmp_path):
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)] + [{"id": "bad", "text": f"{BAD} {TEXTS[0]}"}]
    run = write_run(tmp_path / "run", docs)
    out = tmp_path / "rephrased"
    with serve(responder=reverse_words, model_name="m") as srv:
        res = rephrase(run, out, srv)
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)
        t = s["this_run"]
        assert t["kept"] == 5 and t["dropped_by_reason"] == {"invalid_unicode": 1} and t["failed"] == 0
        assert t["documents_read"] == t["kept"] + t["dropped"]
        assert {r["id"]: r["reason"] for r in jsonl(out / "rejected.ndjson")} == {"bad": "invalid_unicode"}
        assert len(jsonl(out / "rephrased.jsonl")) == 5
        assert json.loads((out / "rephrase_summary.json").read_text())["this_run"]["kept"] == 5
        asked = srv.requests
        again = rephrase(run, out, srv)
        assert again.exit_code == 0, again.output
        s2 = json.loads(again.output)
        assert s2["this_run"]["already_done"] == 6 and srv.requests == asked  # the dropped answer is not asked again
        assert s2["folder"]["dropped_by_reason"] == {"invalid_unicode": 1} and s2["folder"]["documents"] == 5


def test_rephrase_counts_source_documents_that_are_not_valid_unicode(tmp_path):
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
    docs += [{"id": "t", "text": "a lone \ud800 surrogate in the text"},
             {"id": "m", "text": TEXTS[1] + " again", "metadata": {"source": "x\udc00"}}]
    run = write_run(tmp_path / "run", docs)
    with serve(responder=reverse_words, model_name="m") as srv:
        res = rephrase(run, tmp_path / "rephrased", srv)
        assert res.exit_code == 0, res.output
        t = json.loads(res.output)["this_run"]
        assert t["skipped_input"] == {"invalid_unicode": 2} and t["kept"] == 5 and srv.requests == 5
        assert t["documents_read"] == 7 == t["kept"] + t["dropped"] + sum(t["skipped_input"].values())


def test_annotate_keeps_an_answer_with_a_lone_surrogate_unscored_and_resumes(tmp_path):
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)] + [{"id": "bad", "text": f"{BAD} {TEXTS[0]}"}]
    docs.append({"id": "u", "text": "a lone \ud800 surrogate in the text"})
    run = write_run(tmp_path / "run", docs)
    out = tmp_path / "ann.jsonl"
    with serve(responder=lambda p, m, chat: reverse_words(p, m) if BAD in p else ("Educational score: 2", 4, 3),
               model_name="m") as srv:
        res = annotate(run, out, srv)
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["annotated"] == 6 and s["scored"] == 5 and s["invalid_unicode"] == 1 and s["failed"] == 0
        assert s["skipped_input"] == {"invalid_unicode": 1} and s["documents_read"] == 7
        bad = next(r for r in jsonl(out) if r["id"] == "bad")
        assert bad["score"] is None and bad["score_problem"] == "invalid_unicode"  # not scored from a broken answer
        asked = srv.requests
        again = annotate(run, out, srv)
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["already_done"] == 6 and srv.requests == asked and len(jsonl(out)) == 6


@pytest.mark.parametrize("metas", [[{"page_type": 1}, {"page_type": 3}, {}, {}],  # values that never pass
                                   [{"page_type": "article"}, {}, {}, {}]],  # a string: never compares with 5
                         ids=["small", "string"])
def test_a_where_that_selects_nothing_is_refused_as_the_mixer_refuses_it(tmp_path, metas):
    from cuvee.mixer.config import MixConfigError, SourceConfig
    from cuvee.mixer.sources import estimate_source, resolve_files

    where = {"page_type": {"gt": 5}}
    run = write_run(tmp_path / "run", [{"id": f"d{i}", "text": TEXTS[i], "metadata": m} for i, m in enumerate(metas)])
    src = SourceConfig(name="web", paths=[str(run / "output")], weight=1.0, where=where)
    with pytest.raises(MixConfigError, match="no documents left after filtering"):
        estimate_source(src, resolve_files(src), tokenizer=None)  # the mixer's rule for the same condition
    with serve(responder=reverse_words, model_name="m") as srv:
        res = rephrase(run, tmp_path / "rephrased", srv, "--where", json.dumps(where))
        assert srv.requests == 0
    err = res.output.strip()
    assert res.exit_code == 1 and "\n" not in err and "Traceback" not in err, res.output
    assert "--where: no document matched (4 failed 'page_type')" in err and "nothing was generated" in err
