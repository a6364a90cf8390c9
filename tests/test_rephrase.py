"""`cuvee rephrase` end to end, offline: a real OpenAI-compatible server on 127.0.0.1 and a small real causal LM.

The endpoint tests serve a scripted rewriter (words in reverse order; markers in a document make it answer
empty, over-long, with the prompt or with the input) through ``cuvee.classifiers.llm_server``, and count
every generation it performs; the resume test kills ``cuvee rephrase`` with SIGKILL while requests are in
flight and checks that the rerun asks for exactly the pieces no file recorded. The local tests use a tiny
random-weight Llama saved with ``save_pretrained`` next to the bundled GPT-NeoX-style tokenizer.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuvee.classifiers.llm_server import serve
from cuvee.cli import main as cuvee_main
from cuvee.kernel.workdir import PLAN
from cuvee.rephrase.checks import Checks
from cuvee.rephrase.chunks import TokenCounter, split_document
from cuvee.rephrase.cli import load_style

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_JSON = REPO / "cuvee" / "assets" / "tokenizers" / "dolma_gpt-neo-test-tokenizer.json"
WORDS = ["river", "valley", "harbour", "mountain", "village", "farmer", "market", "winter", "summer", "bridge", "castle", "forest", "library", "teacher", "student", "garden", "engine", "station", "railway", "museum", "painter", "sailor", "doctor", "lantern", "orchard", "meadow"]


def sentence(i: int, n: int = 12) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] + str((i + k) % 10) for k in range(n)) + "."


def paragraph(i: int, sentences: int = 3) -> str:
    return " ".join(sentence(i * 10 + s) for s in range(sentences))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("tok")
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_JSON), eos_token="<|endoftext|>")
    tok.save_pretrained(root)
    return str(root)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder (stats.json next to output/): a long document first, then short ones and trouble makers."""
    run = tmp_path_factory.mktemp("run")
    (run / "stats.json").write_text("{}")
    (run / "output").mkdir()
    docs = [{"id": "long", "text": "\n".join(paragraph(i, 4) for i in range(8)), "metadata": {"quality_bucket": 3}}]
    docs += [{"id": f"d{i}", "text": paragraph(100 + i), "metadata": {"quality_bucket": i}} for i in range(6)]
    docs += [{"id": "echo", "text": "ECHO-PROMPT " + paragraph(200)}, {"id": "copy", "text": "COPY-INPUT " + paragraph(201)},
             {"id": "void", "text": "EMPTY-ANSWER " + paragraph(202)}, {"id": "ramble", "text": "LONG-ANSWER " + paragraph(203)},
             {"id": "blank", "text": "   "}, {"id": "d2", "text": "a repeated id"}]
    with open(run / "output" / "00000.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    return run


class Rewriter:
    """The scripted model behind the loopback server; ``generated`` lists every prompt it answered."""

    def __init__(self, template, admit: int | None = None):
        self.template, self.admit = template, admit
        self.generated: list[str] = []
        self.held = 0
        self.hold = threading.Event()  # never set while a test runs: held requests never generate
        self._lock = threading.Lock()

    def __call__(self, prompt: str, max_tokens: int, chat: bool = True):
        with self._lock:
            admitted = self.admit is None or len(self.generated) + self.held < self.admit
            if not admitted:
                self.held += 1
        if not admitted:
            self.hold.wait()
            raise RuntimeError("held request released")
        doc = self.template.extract(prompt) or ""
        if "ECHO-PROMPT" in doc:
            text = prompt
        elif "COPY-INPUT" in doc:
            text = doc
        elif "EMPTY-ANSWER" in doc:
            text = ""
        elif "LONG-ANSWER" in doc:
            text = " ".join(["more"] * (max_tokens + 5))
        else:
            text = " ".join(reversed(doc.split()))
        with self._lock:
            self.generated.append(prompt)
        ct = min(len(text.split()), max_tokens)
        return text, len(prompt.split()), ct


def cli(*args):
    return CliRunner().invoke(cuvee_main, ["rephrase", *map(str, args)])


def endpoint_args(srv, tokenizer_dir, out, *extra):
    return ["--out", out, "--prompt", "wikipedia", "--model", "scripted", "--endpoint", srv.url, "--tokenizer",
            tokenizer_dir, "--max-input-tokens", 120, "--max-new-tokens", 400, "--concurrency", 2, *extra]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


# ---------------------------------------------------------------- pieces and checks


def test_pieces_are_exact_and_within_budget(tokenizer_dir):
    from transformers import AutoTokenizer

    counter = TokenCounter(AutoTokenizer.from_pretrained(tokenizer_dir))
    text = "\n".join(paragraph(i, 4) for i in range(8)) + "\n" + "x" * 3000  # the last line alone is over budget
    pieces = split_document(text, 100, counter)
    assert len(pieces) > 8 and "".join(pieces) == text
    assert all(counter.count(p) <= 100 for p in pieces)
    assert split_document("short text", 100, counter) == ["short text"]
    assert split_document(text, 0, counter) == [text]


def test_checks_name_each_failure():
    c = Checks()
    inst = load_style("wikipedia").text.replace("{text}", " ")
    src = paragraph(1)
    assert c.failure("   ", src, inst, "stop", 1, 100) == "empty"
    assert c.failure("some words", src, inst, "length", 100, 100) == "truncated"
    assert c.failure("some words", src, inst, None, 100, 100) == "truncated"  # no reason sent: the limit tells
    assert c.failure(inst + src, src, inst, "stop", 10, 100) == "prompt_copy"
    assert c.failure(src.upper() + " ", src, inst, "stop", 10, 100) == "copied_input"
    assert c.failure(" ".join(reversed(src.split())), src, inst, "stop", 10, 100) is None
    assert Checks(max_input_similarity=1.0).failure(src, src, inst, "stop", 10, 100) is None


def test_shipped_styles_are_marked_as_ours():
    for style in ("wikipedia", "diverse_qa", "distill", "extract_knowledge", "knowledge_list"):
        t = load_style(style)
        head = (REPO / "cuvee" / "assets" / "prompts" / f"rephrase_{style}.txt").read_text().split("{text}")[0]
        assert "WRITTEN BY CUVEE" in head and "not the prompt text" in head
        assert t.text.count("{text}") == 1 and "WRITTEN BY CUVEE" not in t.text  # the marking is not sent


# ---------------------------------------------------------------- endpoint


def test_endpoint_rewrites_counts_drops_and_records_provenance(run_dir, tokenizer_dir, tmp_path):
    template = load_style("wikipedia")
    rewriter = Rewriter(template)
    out = tmp_path / "rephrased"
    with serve(responder=rewriter, model_name="scripted") as srv:
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--price-per-mtok", 1.0, 2.0))
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)["this_run"]
        assert s["kept"] == 7 and s["dropped_by_reason"] == {"copied_input": 1, "empty": 1, "prompt_copy": 1, "truncated": 1}
        assert s["skipped_input"] == {"duplicate_id": 1, "empty_text": 1} and s["documents_read"] == 13
        assert s["documents_read"] == s["kept"] + s["dropped"] + sum(s["skipped_input"].values()) + s["failed"] + s["remaining"]
        assert s["generations"] == len(rewriter.generated) == srv.requests
        assert s["estimated_cost"] == round(s["prompt_tokens"] / 1e6 + 2 * s["completion_tokens"] / 1e6, 6)
        docs = records(out / "rephrased.jsonl")
        by_source = {d["metadata"]["rephrase_source_id"]: d for d in docs}
        assert sorted(by_source) == sorted(["long", *(f"d{i}" for i in range(6))])
        long = by_source["long"]
        assert long["id"] == "long#rephrase_wikipedia" and long["metadata"]["rephrase_pieces"] > 2
        src = json.loads((run_dir / "output" / "00000.jsonl").read_text().splitlines()[0])["text"]
        assert sorted(long["text"].split()) == sorted(src.split())  # every piece rewritten, joined, none lost
        m = by_source["d1"]["metadata"]
        assert m["quality_bucket"] == 1 and m["rephrase_prompt_sha256"] == template.sha256 and m["rephrase_model"] == "scripted"
        assert m["rephrase_generation"] == {"max_new_tokens": 400, "temperature": 0.0, "top_p": None, "seed": None,
                                            "max_input_tokens": 120}
        assert m["rephrase_prompt_tokens"] > 0 and m["rephrase_source_sha256"]
        rejected = {r["id"]: r["reason"] for r in records(out / "rejected.ndjson")}
        assert rejected == {"echo": "prompt_copy", "copy": "copied_input", "void": "empty", "ramble": "truncated"}

        before = srv.requests
        again = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out))
        assert again.exit_code == 0, again.output
        s2 = json.loads(again.output)
        assert srv.requests == before and s2["this_run"]["already_done"] == 11 and s2["this_run"]["generations"] == 0
        assert s2["folder"]["documents"] == 7 and s2["folder"]["completion_tokens"] == s["completion_tokens"]


def test_mixer_reads_the_folder_as_a_source(run_dir, tokenizer_dir, tmp_path):
    from cuvee.mixer.config import SourceConfig
    from cuvee.mixer.sources import SourceScan, resolve_files, select_texts

    out = tmp_path / "rephrased"
    with serve(responder=Rewriter(load_style("wikipedia")), model_name="scripted") as srv:
        assert cli(run_dir, *endpoint_args(srv, tokenizer_dir, out)).exit_code == 0
    src = SourceConfig(name="rephrased", paths=[str(out)], weight=1.0, where={"quality_bucket": {">=": 2}})
    files = resolve_files(src)
    assert [Path(f).name for f in files] == ["rephrased.jsonl"]
    scan = SourceScan("rephrased")
    texts = list(select_texts(src, files, scan))
    assert scan.read == 7 and len(texts) == 5 and scan.dropped == {"where_quality_bucket": 2}


def test_changed_input_prompt_or_model_is_refused(run_dir, tokenizer_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    out = tmp_path / "rephrased"
    with serve(responder=Rewriter(load_style("wikipedia")), model_name="scripted") as srv:
        assert cli(run, *endpoint_args(srv, tokenizer_dir, out, "--limit", 2)).exit_code == 0
        args = endpoint_args(srv, tokenizer_dir, out)
        r = cli(run, *[("distill" if a == "wikipedia" else a) for a in args])
        assert r.exit_code != 0 and "prompt" in r.output and "different plan" in r.output and len(r.output.strip().splitlines()) == 1
        r = cli(run, *args, "--temperature", 0.5)
        assert r.exit_code != 0 and "generation.temperature" in r.output
        with open(run / "output" / "00000.jsonl", "a") as f:
            f.write(json.dumps({"id": "new", "text": paragraph(300)}) + "\n")
        before = srv.requests
        r = cli(run, *args)
        assert r.exit_code != 0 and "00000.jsonl changed since" in r.output and srv.requests == before
        r = cli(run, *args, "--fresh")
        assert r.exit_code == 0, r.output and json.loads(r.output)["this_run"]["kept"] == 8
        foreign = tmp_path / "theirs"
        foreign.mkdir()
        (foreign / "notes.txt").write_text("mine")
        r = cli(run, *endpoint_args(srv, tokenizer_dir, foreign))
        assert r.exit_code != 0 and "did not create" in r.output
        r = cli(run, *endpoint_args(srv, tokenizer_dir, run / "output" / "rephrased"))
        assert r.exit_code != 0 and "overlaps the input" in r.output and not (run / "output" / "rephrased").exists()


@pytest.mark.parametrize("args, message", [
    (["--prompt", "wikipeda"], "did you mean 'wikipedia'"),
    (["--temperature", "3"], "temperature must be in [0, 2]"),
    (["--max-input-similarity", "0"], "max_input_similarity must be in (0, 1]"),
    (["--concurrency", "0"], "--concurrency must be >= 1"),
    (["--endpoint", "ftp://x"], "give an http:// or https:// URL"),
    (["--endpoint", "http://127.0.0.1:9/v1"], "no local tokenizer"),
    (["--where", "{quality_bucket: {lten: 9}}"], "unknown operator 'lten'; did you mean 'lte'"),
    (["--where", "{quality_bucket: {lte: [9]}}"], "--where.quality_bucket.lte needs a finite number or a string"),
    (["--where", "{quality_bucket: [1, 2]}"], "write {in: [1, 2]}"),
    (["--where", "[1, 2]"], "--where: give a mapping of metadata key to condition"),
    (["--where", "{}"], "--where: give a mapping of metadata key to condition"),
    (["--where", "{1: 2}"], "keys are metadata key names"),
    (["--where", "{quality_bucket: {lte: 9}"], "--where: not valid YAML"),
    (["--where", "{d: 2024-01-01}"], "--where: Object of type date is not JSON serializable"),
    (["--where", "{q: {in: [.nan]}}"], "--where: NaN and infinite values match nothing"),
    (["--where", "{a: &a [x, x, x, x, x, x, x, x, x, x], b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a], "
                 "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b], d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c], "
                 "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d], f: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]}"],
     "--where: refused"),
])
def test_bad_settings_are_one_line_before_any_work(run_dir, tmp_path, args, message):
    base = {"--prompt": "wikipedia", "--model": "no-such-model-here", "--out": str(tmp_path / "o")}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    r = cli(run_dir, *[x for kv in base.items() for x in kv])
    assert r.exit_code != 0 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "o").exists()


def test_kill_9_then_rerun_generates_nothing_twice(run_dir, tokenizer_dir, tmp_path):
    """Three pieces of the long document are answered, further requests are held by the server (in flight),
    the process is killed with SIGKILL; the rerun asks only for what no file recorded."""
    template = load_style("wikipedia")
    rewriter = Rewriter(template, admit=3)
    out = tmp_path / "rephrased"
    with serve(responder=rewriter, model_name="scripted") as srv:
        argv = [sys.executable, "-c", "from cuvee.cli import main; main()", "rephrase", str(run_dir),
                *map(str, endpoint_args(srv, tokenizer_dir, out))]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
        try:
            deadline = time.monotonic() + 300
            while not (len(records(out / "parts.ndjson")) == 3 and rewriter.held >= 1):
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "the first run never recorded three pieces"
                time.sleep(0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        first = list(rewriter.generated)
        assert len(first) == 3 and not (out / "rephrased.jsonl").read_text()  # the long document is not finished

        rewriter.admit = None
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out))
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)
        rewriter.hold.set()
    counts = Counter(rewriter.generated)
    assert max(counts.values()) == 1  # no piece was generated twice
    assert s["this_run"]["pieces_reused"] == 3 and s["this_run"]["generations"] == len(rewriter.generated) - 3
    docs = records(out / "rephrased.jsonl")
    assert len(docs) == 7 and len({d["id"] for d in docs}) == 7
    long = next(d for d in docs if d["metadata"]["rephrase_source_id"] == "long")
    src = json.loads((run_dir / "output" / "00000.jsonl").read_text().splitlines()[0])["text"]
    assert sorted(long["text"].split()) == sorted(src.split())
    assert s["folder"]["documents"] == 7 and s["folder"]["dropped"] == 4


def test_torn_last_line_is_cut_and_redone(run_dir, tokenizer_dir, tmp_path):
    out = tmp_path / "rephrased"
    rewriter = Rewriter(load_style("wikipedia"))
    with serve(responder=rewriter, model_name="scripted") as srv:
        assert cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--limit", 3)).exit_code == 0
        path = out / "rephrased.jsonl"
        data = path.read_bytes()
        path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 20])  # the last record cut mid-line
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out))
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)
        assert s["folder"]["torn_lines_cut"] == 1 and s["folder"]["documents"] == 7
        assert len(records(path)) == 7
        path.write_text(path.read_text() + "not json\n")
        r = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out))
        assert r.exit_code != 0 and "changed outside cuvee" in r.output


def test_server_errors_are_retried_and_a_dead_endpoint_is_one_line(run_dir, tokenizer_dir, tmp_path):
    rewriter = Rewriter(load_style("wikipedia"))
    out = tmp_path / "rephrased"
    with serve(responder=rewriter, model_name="scripted") as srv:
        srv.fault = lambda n: 503 if n in (0, 1, 5) else None
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--retries", 3))
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)["this_run"]
        assert s["retries"] == 3 and s["kept"] == 7 and srv.requests == len(rewriter.generated) + 3
        url = srv.url
    r = cli(run_dir, *endpoint_args(type("S", (), {"url": url}), tokenizer_dir, tmp_path / "o2", "--retries", 0))
    assert r.exit_code != 0 and "cannot reach endpoint" in r.output and "rerun to resume" in r.output
    assert len(r.output.strip().splitlines()) == 1


# ---------------------------------------------------------------- local model


@pytest.fixture(scope="module")
def tiny_llama(tokenizer_dir, tmp_path_factory):
    """A random-weight Llama whose end-of-text token is one it emits in most (not all) of its answers to the
    distill prompt: so some answers end by themselves and others are cut by max_new_tokens."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048))
    gens = []
    for i in range(8):
        ids = torch.tensor([tok(load_style("distill").fill(paragraph(100 + i)))["input_ids"]])
        with torch.no_grad():
            gens.append(set(model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)[0, ids.shape[1] + 1:].tolist()))
    eos = Counter(t for g in gens for t in g if sum(t in h for h in gens) < len(gens)).most_common(1)[0][0]
    tok.eos_token = tok.convert_ids_to_tokens(eos)
    model.config.eos_token_id = model.generation_config.eos_token_id = eos
    root = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return str(root)


def test_local_model_batches_match_the_served_model(run_dir, tiny_llama, tmp_path):
    common = ["--prompt", "distill", "--max-input-tokens", 60, "--max-new-tokens", 12, "--device", "cpu",
              "--max-input-similarity", 1.0, "--max-prompt-copy", 1.0]
    a = cli(run_dir, "--out", tmp_path / "b1", "--model", tiny_llama, "--batch-size", 1, *common)
    b = cli(run_dir, "--out", tmp_path / "b4", "--model", tiny_llama, "--batch-size", 4, *common)
    with serve(tiny_llama, model_name="tiny", device="cpu") as srv:
        c = cli(run_dir, "--out", tmp_path / "http", "--model", "tiny", "--endpoint", srv.url, "--tokenizer", tiny_llama,
                "--concurrency", 3, *common)
    for r in (a, b, c):
        assert r.exit_code == 0, r.output
    sa, sb, sc = (json.loads(r.stdout)["this_run"] for r in (a, b, c))
    assert sa["documents_read"] == 13 and sa["kept"] + sa["dropped"] == 11
    assert sa["kept"] >= 1 and sa["dropped_by_reason"].get("truncated", 0) >= 1  # answers that stopped, and answers cut off

    def outcome(folder):
        kept = {d["metadata"]["rephrase_source_id"]: d["text"] for d in records(folder / "rephrased.jsonl")}
        return kept, {r["id"]: r["reason"] for r in records(folder / "rejected.ndjson")}

    assert outcome(tmp_path / "b1") == outcome(tmp_path / "b4") == outcome(tmp_path / "http")
    assert sa["completion_tokens"] == sb["completion_tokens"] == sc["completion_tokens"]
    assert sa["prompt_tokens"] == sb["prompt_tokens"] == sc["prompt_tokens"]



# ---------------------------------------------------------------- where: only the documents a mix will use


def test_where_rewrites_only_matching_documents_and_binds_the_condition(run_dir, tokenizer_dir, tmp_path):
    rewriter = Rewriter(load_style("wikipedia"))
    out = tmp_path / "rephrased"
    with serve(responder=rewriter, model_name="scripted") as srv:
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--where", "{quality_bucket: {lte: 2}}"))
        assert res.exit_code == 0, res.output
        s = json.loads(res.output)
        t = s["this_run"]
        # d0-d2 match; long (bucket 3), d3-d5 and the four without a bucket are skipped; blank and the repeated id
        # are skipped as before, without looking at their metadata
        assert t["kept"] == 3 and t["skipped_by_where"] == 8 and t["skipped_input"] == {"duplicate_id": 1, "empty_text": 1}
        assert t["documents_read"] == 13 == t["kept"] + t["dropped"] + t["failed"] + t["remaining"] + t["skipped_by_where"] + 2
        assert t["generations"] == len(rewriter.generated) == srv.requests == 3
        assert s["where"] == {"quality_bucket": {"<=": 2}}
        assert sorted(d["metadata"]["rephrase_source_id"] for d in records(out / "rephrased.jsonl")) == ["d0", "d1", "d2"]
        assert json.loads((out / PLAN).read_text())["binding"]["where"] == {"quality_bucket": {"<=": 2}}

        same = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--where", '{"quality_bucket": {"<=": 2}}'))
        assert same.exit_code == 0, same.output  # the same condition spelled another way (JSON, <=) resumes
        assert json.loads(same.output)["this_run"]["already_done"] == 3 and srv.requests == 3
        for other in (["--where", "{quality_bucket: {lte: 3}}"], []):
            r = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, *other))
            assert r.exit_code != 0 and "different plan" in r.output and "where" in r.output, r.output
        assert srv.requests == 3


def test_where_selects_what_the_mixer_selects(run_dir, tokenizer_dir, tmp_path):
    """The same where, in rephrase and in a mix source, takes the same source documents."""
    import hashlib

    from cuvee.mixer.config import SourceConfig
    from cuvee.mixer.sources import SourceScan, resolve_files, select_texts

    where = {"quality_bucket": {"gte": 1, "lt": 4, "not_in": [2]}}
    out = tmp_path / "rephrased"
    with serve(responder=Rewriter(load_style("wikipedia")), model_name="scripted") as srv:
        res = cli(run_dir, *endpoint_args(srv, tokenizer_dir, out, "--where", json.dumps(where)))
        assert res.exit_code == 0, res.output
    rewritten = {d["metadata"]["rephrase_source_sha256"] for d in records(out / "rephrased.jsonl")}
    src = SourceConfig(name="web", paths=[str(run_dir / "output")], weight=1.0, where=where)
    mixed = {hashlib.sha256(t.encode()).hexdigest() for t in select_texts(src, resolve_files(src), SourceScan("web"))}
    assert len(rewritten) == 3 and rewritten == mixed  # long (3), d1 and d3


def test_where_key_no_document_has_is_one_line_and_generates_nothing(run_dir, tokenizer_dir, tmp_path):
    rewriter = Rewriter(load_style("wikipedia"))
    with serve(responder=rewriter, model_name="scripted") as srv:
        r = cli(run_dir, *endpoint_args(srv, tokenizer_dir, tmp_path / "o", "--where", "{quality_buckt: {lte: 9}}"))
        assert r.exit_code != 0 and len(r.output.strip().splitlines()) == 1, r.output
        assert "no document has metadata 'quality_buckt'; did you mean 'quality_bucket'?" in r.output  # the mixer's words
        assert "--fresh" in r.output and srv.requests == 0
