"""`cuvee classify annotate` (FineWeb-Edu step 1) end to end, offline.

The LLM is real but tiny: a byte-level Llama trained here for a few dozen CPU steps with cuvee's own
trainer and exported to Hugging Face format. Its answers are gibberish, so the local and HTTP paths are
checked for accounting, equality of greedy outputs, resume, retries and errors; the score parser is
checked on crafted answers, and the train -> transformer_quality step on a scripted oracle's scores.
"""

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from datatrove.data import Document

from cuvee.classifiers.annotate import (
    parse_score,
    read_score,
    sample_documents,
)
from cuvee.classifiers.annotations_file import read_done
from cuvee.classifiers.llm_server import KeyedResponder, serve
from cuvee.cli import main as cuvee_main
from cuvee.kernel.ledger import Ledger
from cuvee.llm.prompt import load_prompt
from cuvee.train.demo_data import load_wcxb, split_heldout

N_DOCS = 6


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    from cuvee.train.config import TrainConfig
    from cuvee.train.demo_data import build_variant_mix
    from cuvee.train.hf_export import export_checkpoint
    from cuvee.train.trainer import train

    root = tmp_path_factory.mktemp("tiny_lm")
    rows, _ = split_heldout(load_wcxb())
    build_variant_mix(root / "shards", "train", rows[:60], {"clean": 1.0}, max_doc_bytes=1500)
    cfg = TrainConfig(name="annotator", model={"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 4096},
                      data={"paths": [str(root / "shards")], "seq_len": 128, "seed": 0},
                      optim={"lr": 3e-3, "warmup_steps": 2, "schedule": "cosine"}, steps=30, micro_batch=4, grad_accum=1,
                      log_every=10, ckpt_every=0, out_dir=str(root / "run"), threads=1)
    res = train(cfg, quiet=True)
    return str(export_checkpoint(res["checkpoint"], root / "hf"))


@pytest.fixture(scope="module")
def wcxb():
    return load_wcxb()


@pytest.fixture(scope="module")
def docs_file(tmp_path_factory, wcxb):
    path = tmp_path_factory.mktemp("docs") / "output" / "part.jsonl"
    path.parent.mkdir(parents=True)
    with open(path, "w") as f:
        f.writelines(json.dumps({"id": f"doc-{i}", "text": r["main_content"]}) + "\n" for i, r in enumerate(wcxb[:20]))
        f.write(json.dumps({"id": "empty", "text": "  "}) + "\n")
        f.write(json.dumps({"id": "doc-3", "text": "a repeated id"}) + "\n")
    return path


@pytest.fixture(scope="module")
def short_prompt(tmp_path_factory):
    p = tmp_path_factory.mktemp("prompt") / "short.txt"
    p.write_text("# a comment line, not sent\nRate this page.\n{text}\nEducational score:")
    return str(p)


def cli(*args):
    return CliRunner().invoke(cuvee_main, ["classify", "annotate", *map(str, args), "--no-progress"])


def lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").split("\n") if line]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- parsing, template, sampling


def test_parse_score_on_crafted_answers():
    assert parse_score("The extract is a tutorial.\nEducational score: 4") == 4
    assert parse_score("Educational Score: **3**") == 3
    assert parse_score("educational score:5/5") == 5
    # never clamped or rounded: out of range / not whole is counted, not turned into a label
    assert read_score("Educational score: 7") == (None, "out_of_range") and parse_score("Educational score: -2") is None
    assert read_score("Educational score: 2.5") == (None, "not_integer")
    # the last one counts (models restate the format before answering)
    assert parse_score('Use "Educational score: <total points>". ... Educational score: 1') == 1
    for bad in ("", None, "I would give it four points.", "Educational score: <total points>", "Score: 3"):
        assert parse_score(bad) is None


def test_shipped_fineweb_edu_prompt():
    t = load_prompt("fineweb_edu")
    assert t.text.startswith("Below is an extract from a web page. Evaluate whether the page has a high educational value")
    assert "additive 5-point scoring system" in t.text and '"Educational score: <total points>"' in t.text
    assert t.text.count("{text}") == 1 and not t.text.lstrip().startswith("#")
    filled = t.fill("Photosynthesis {text} turns light into sugar.")
    assert t.extract(filled) == "Photosynthesis {text} turns light into sugar."
    assert len(t.sha256) == 64 and t.sha256 == load_prompt(t.path).sha256
    with pytest.raises(Exception, match="not a file and not a shipped template"):
        load_prompt("no_such_prompt")


def test_sampling_is_seeded_nested_and_order_free(docs_file, tmp_path):
    counts = {}
    a = [d.id for d in sample_documents([docs_file], 5, seed=0, counts=counts)]
    assert a == [d.id for d in sample_documents([docs_file], 5, seed=0)] and len(set(a)) == 5
    assert counts == {"empty_text": 1, "documents_read": 22} or counts == {"empty_text": 1, "duplicate_id": 1, "documents_read": 22}
    everything = {}
    assert len(sample_documents([docs_file], 100, seed=0, counts=everything)) == 20
    assert everything == {"empty_text": 1, "duplicate_id": 1, "documents_read": 22}
    assert [d.id for d in sample_documents([docs_file], 9, seed=0)][:5] == a  # a larger n extends a smaller one
    assert [d.id for d in sample_documents([docs_file], 5, seed=1)] != a
    rev = tmp_path / "rev.jsonl"
    rev.write_text("".join(reversed(docs_file.read_text().splitlines(keepends=True))))
    assert sorted(d.id for d in sample_documents([rev], 5, seed=0)) == sorted(a)
    # a run directory means its output/ folder
    (docs_file.parent.parent / "stats.json").write_text("{}")
    assert [d.id for d in sample_documents([docs_file.parent.parent], 5, seed=0)] == a


OWN = {"text_sha256": "0" * 64, "score": 1, "answer": "Educational score: 1", "model": "m", "prompt": "p",
       "prompt_sha256": "1" * 64, "prompt_tokens": 3, "completion_tokens": 4}


def test_partial_last_line_is_dropped(tmp_path):
    p = tmp_path / "a.jsonl"
    first = json.dumps({"id": "a", **OWN}) + "\n"
    p.write_text(first + '{"id": "b", "sco')
    done, contents = read_done(p)
    Ledger(p, contents).close()
    assert set(done) == {"a"} and contents.torn == 1 and p.read_text() == first


# ---------------------------------------------------------------- local model


def test_local_model_annotates_with_full_accounting(tiny_lm, docs_file, tmp_path):
    out = tmp_path / "ann.jsonl"
    res = cli(docs_file, "--model", tiny_lm, "--n", 4, "--max-chars", 120, "--max-new-tokens", 6, "--out", out,
              "--price-per-mtok", 1.0, 2.0)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    recs = lines(out)
    assert len(recs) == s["sampled"] == s["annotated"] == 4 and s["scored"] + s["unparsed"] == 4
    assert [r["id"] for r in recs] == [d.id for d in sample_documents([docs_file], 4, seed=0)]
    for r in recs:
        assert r["score"] == parse_score(r["answer"])  # gibberish -> null, never guessed
        assert r["model"] == tiny_lm and r["prompt_sha256"] == load_prompt("fineweb_edu").sha256 and r["text"]
        assert r["prompt_tokens"] > 1000 and 1 <= r["completion_tokens"] <= 6  # byte tokenizer: >= 1 token per char
    assert s["prompt_tokens"] == sum(r["prompt_tokens"] for r in recs) and s["completion_tokens"] > 0
    assert s["estimated_cost"] == pytest.approx(s["prompt_tokens"] / 1e6 + 2 * s["completion_tokens"] / 1e6, abs=1e-6)
    assert s["docs_per_s"] > 0 and s["tokens_per_s"] > 0
    # rerun: nothing left to do, nothing duplicated
    res = cli(docs_file, "--model", tiny_lm, "--n", 4, "--max-chars", 120, "--max-new-tokens", 6, "--out", out)
    assert res.exit_code == 0 and json.loads(res.stdout)["already_done"] == 4 and len(lines(out)) == 4


# ---------------------------------------------------------------- HTTP endpoint serving the same model


@pytest.fixture(scope="module")
def server(tiny_lm):
    srv = serve(tiny_lm, model_name=tiny_lm)
    yield srv
    srv.close()


def http_args(srv, tiny_lm, docs_file, short_prompt, out, *extra):
    return (docs_file, "--endpoint", srv.url, "--model", tiny_lm, "--prompt", short_prompt, "--n", N_DOCS,
            "--max-chars", 200, "--max-new-tokens", 8, "--out", out, "--retries", 1, *extra)


def test_http_matches_local_and_resumes(tiny_lm, server, docs_file, short_prompt, tmp_path):
    local = tmp_path / "local.jsonl"
    res = cli(docs_file, "--model", tiny_lm, "--prompt", short_prompt, "--n", N_DOCS, "--max-chars", 200,
              "--max-new-tokens", 8, "--out", local)
    assert res.exit_code == 0, res.output
    want = {r["id"]: r for r in lines(local)}

    out = tmp_path / "http.jsonl"
    res = cli(*http_args(server, tiny_lm, docs_file, short_prompt, out, "--limit", 2, "--concurrency", 3))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["remaining"] == N_DOCS - 2 and len(lines(out)) == 2
    with open(out, "a") as f:  # a kill in the middle of a write
        f.write('{"id": "doc-1", "text": "torn')
    res = cli(*http_args(server, tiny_lm, docs_file, short_prompt, out, "--concurrency", 3))
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["dropped_partial_lines"] == 1 and s["already_done"] == 2 and s["annotated"] == N_DOCS - 2
    got = lines(out)
    assert len(got) == N_DOCS and {r["id"] for r in got} == set(want)
    for r in got:  # greedy decoding: the server's answers and token counts (usage) equal the local ones
        w = want[r["id"]]
        assert (r["answer"], r["score"], r["prompt_tokens"], r["completion_tokens"]) == \
               (w["answer"], w["score"], w["prompt_tokens"], w["completion_tokens"])


def test_http_retries_503_and_resumes_after_server_failure(tiny_lm, server, docs_file, short_prompt, tmp_path):
    out = tmp_path / "ann.jsonl"
    try:
        server.fault = lambda n, base=server.requests: 503 if n == base else None  # first request: 503
        res = cli(*http_args(server, tiny_lm, docs_file, short_prompt, out, "--limit", 2, "--concurrency", 1))
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["retries"] == 1 and len(lines(out)) == 2

        server.fault = lambda n, base=server.requests: 500 if n >= base + 2 else None  # the server breaks after 2
        res = cli(*http_args(server, tiny_lm, docs_file, short_prompt, out, "--concurrency", 1))
        assert res.exit_code == 1
        err = res.output.strip()
        assert "\n" not in err and "HTTP 500" in err and "gave up after 2 attempts" in err and "rerun to resume" in err
        assert len(lines(out)) == 4
    finally:
        server.fault = None
    res = cli(*http_args(server, tiny_lm, docs_file, short_prompt, out, "--concurrency", 2))
    assert res.exit_code == 0, res.output
    ids = [r["id"] for r in lines(out)]
    assert len(ids) == len(set(ids)) == N_DOCS


def test_unreachable_endpoint_is_one_line(docs_file, short_prompt, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    res = cli(docs_file, "--endpoint", url, "--model", "m", "--prompt", short_prompt, "--n", 2, "--out",
              tmp_path / "a.jsonl", "--retries", 1)
    assert res.exit_code == 1
    err = res.output.strip()
    assert err.startswith("Error: ") and "\n" not in err and "cannot reach endpoint" in err and url in err
    res = cli(docs_file, "--endpoint", url, "--model", "m", "--out", tmp_path / "b.jsonl", "--api-key-env", "CUVEE_NO_SUCH_VAR")
    assert res.exit_code == 1 and "CUVEE_NO_SUCH_VAR" in res.output


def test_no_usage_counts_with_model_tokenizer_and_completions_api(tiny_lm, docs_file, short_prompt, tmp_path):
    with serve(tiny_lm, model_name=tiny_lm) as with_usage, serve(tiny_lm, model_name=tiny_lm, usage=False) as without:
        a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
        assert cli(*http_args(with_usage, tiny_lm, docs_file, short_prompt, a, "--limit", 2)).exit_code == 0
        assert cli(*http_args(without, tiny_lm, docs_file, short_prompt, b, "--limit", 2)).exit_code == 0
        res = cli(*http_args(with_usage, tiny_lm, docs_file, short_prompt, c, "--limit", 2, "--api", "completions"))
        assert res.exit_code == 0, res.output

    def key(r):
        return r["id"], r["answer"], r["prompt_tokens"], r["completion_tokens"]

    assert [key(r) for r in lines(a)] == [key(r) for r in lines(b)] == [key(r) for r in lines(c)]


def test_mismatched_output_file_is_refused(docs_file, short_prompt, tmp_path):
    out = tmp_path / "a.jsonl"
    out.write_text(json.dumps({"id": "x", "model": "other-model", "prompt_sha256": "0" * 64}) + "\n")
    with serve(responder=lambda p, m, chat: ("Educational score: 1", 1, 1)) as srv:
        res = cli(docs_file, "--endpoint", srv.url, "--model", "m", "--prompt", short_prompt, "--n", 2, "--out", out)
    assert res.exit_code == 1 and "another --out" in res.output


# ---------------------------------------------------------------- annotations -> regression head -> transformer_quality


def test_annotations_train_regression_head_and_filter(wcxb, tmp_path):
    """A scripted oracle (main content 3-5, boilerplate 0-2, every 7th answer unparseable) over HTTP."""
    from cuvee.pipeline.registry import BuildContext, get_stage

    rows = [r for r in wcxb if r.get("main_content") and len(r.get("without") or []) >= 5]
    docs, answers = [], {}
    template = load_prompt("fineweb_edu")
    for i, r in enumerate(rows[:70]):
        main = " ".join(r["main_content"].split()[:80])
        boiler = " ".join(" ".join(r["without"]).split()[:80])
        for kind, text, score in (("main", main, 4 if len(main.split()) >= 60 else 3), ("boiler", boiler, 1)):
            doc_id = f"{i}-{kind}"
            docs.append({"id": doc_id, "text": text, "kind": kind})
            answers[text[:2000]] = "Gibberish." if len(docs) % 7 == 0 else f"Justification.\nEducational score: {score}"
    src = tmp_path / "run" / "docs.jsonl"
    src.parent.mkdir()
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    ann = tmp_path / "ann.jsonl"
    with serve(responder=KeyedResponder(template, answers, count=lambda t: len(t.split())), model_name="oracle") as srv:
        res = cli(src, "--endpoint", srv.url, "--model", "oracle", "--n", 100, "--out", ann, "--concurrency", 4)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["annotated"] == 100 and s["unparsed"] > 5 and s["scored"] + s["unparsed"] == 100
    assert s["prompt_tokens"] > 100 * 300

    head = tmp_path / "head"
    res = CliRunner().invoke(cuvee_main, ["classify", "train", "--kind", "transformer", "--task", "regression", "--data", str(ann),
                                        "--label-key", "score", "-o", str(head), "--max-length", "64",
                                        "--valid-fraction", "0.2", "--positive-at", "3"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["skipped"] == {"missing_label": s["unparsed"]}  # null scores skipped and counted
    assert report["train_examples"] + report["valid_examples"] == s["scored"]
    assert report["valid_metrics"]["pearson"] > 0.5

    annotated = {r["id"] for r in lines(ann)}
    held = [d for d in docs if d["id"] not in annotated]
    assert len(held) >= 20
    spec = get_stage("transformer_quality")
    ctx = BuildContext(run_dir=tmp_path, work_dir=tmp_path / "work", tasks=1, stage_index=0, stage_name="tq")
    steps = spec.build(spec.params(model=str(head), threshold=3.0, batch_size=16), ctx)
    kept = list(steps[1].run(steps[0].run(iter([Document(text=d["text"], id=d["id"], metadata={"kind": d["kind"]}) for d in held]))))
    assert kept and sum(d.metadata["kind"] == "main" for d in kept) >= 0.8 * len(kept)
