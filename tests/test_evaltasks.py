"""cuvee.evaltasks, the one home of evaluation tasks: a task YAML is constructed as lm-eval constructs it (merge
keys, anchors, includes) before the task-code check, so Python a task file would import is found wherever it
sits; each entry point (lm-eval config, the decontaminate stage's resolution, mix-search validation) refuses it in
one line naming the file, and no payload runs unless code is allowed. Eval files decode strictly; data paths
expand without a shell; one name resolves to one task everywhere; every file a task reads is stamped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lm_eval")

ROWS = [{"question": f"Which material is item number {i} of the old inventory made of, according to the ledger?",
         "choices": ["wood", "stone", "glass"], "label": i % 3} for i in range(3)]
BODY = {"dataset_path": "json", "dataset_kwargs": {"data_files": {"test": "items.jsonl"}}, "test_split": "test",
        "output_type": "multiple_choice", "doc_to_text": "{{question}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{label}}", "metric_list": [{"metric": "acc", "aggregation": "mean"}]}
PAYLOAD = ("import pathlib\npathlib.Path({sentinel!r}).write_text('ran')\n"
           "def f(*a, **k):\n    return a[0] if a else None\n"
           "def process_docs(ds):\n    return ds\n"
           "class Cls:\n    def __init__(self, config=None):\n        self.config = config\n")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _root(d: Path, head: str, name: str = "evil", drop: tuple[str, ...] = ()) -> Path:
    """A task YAML ``head`` + a plain local multiple-choice body (less ``drop``), its data file next to it."""
    _write(d / "items.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS))
    body = {"task": name, **{k: v for k, v in BODY.items() if k not in drop}}
    return _write(d / f"{name}.yaml", head + yaml.safe_dump(body, sort_keys=False))


def _payload(folder: Path, sentinel: Path) -> Path:
    return _write(folder / "payload.py", PAYLOAD.format(sentinel=str(sentinel)))


# each case: (the task YAML to load, the YAML file holding the !function); the payload sits next to the latter
def _top(d):
    return _root(d, "process_docs: !function payload.process_docs\n"), d / "evil.yaml"


def _metric_list(d):
    return _root(d, "metric_list:\n  - metric: !function payload.f\n    aggregation: mean\n",
                 drop=("metric_list",)), d / "evil.yaml"


def _in_list(d):
    return _root(d, "filter_list:\n  - name: f\n    filter:\n      - function: take_first\n"
                    "      - [x, !function payload.f]\n"), d / "evil.yaml"


def _as_class(d):
    return _root(d, "class: !function payload.Cls\n"), d / "evil.yaml"


def _anchor(d):
    return _root(d, "shared: &fn !function payload.f\nprocess_results: *fn\n"), d / "evil.yaml"


def _merge_key_include(d):  # issue #37: include: arrives through a merge key, the !function in the included file
    _write(d / "inc.yaml", "process_docs: !function payload.process_docs\n")
    return _root(d, "metadata: &b {include: inc.yaml}\n<<: *b\n"), d / "inc.yaml"


def _included(d):
    _write(d / "inc.yaml", "process_docs: !function payload.process_docs\n")
    return _root(d, "include: inc.yaml\n"), d / "inc.yaml"


def _nested_relative(d):  # task/evil.yaml -> ../common/base.yaml -> deeper/inner.yaml (relative to common/)
    _write(d / "common" / "base.yaml", "include: deeper/inner.yaml\noutput_type: multiple_choice\n")
    _write(d / "common" / "deeper" / "inner.yaml", "process_docs: !function payload.process_docs\n")
    return _root(d / "task", "include: ../common/base.yaml\n"), d / "common" / "deeper" / "inner.yaml"


def _include_list(d):
    _write(d / "one.yaml", "test_split: test\n")
    _write(d / "two.yaml", "process_docs: !function payload.process_docs\n")
    return _root(d, "include: [one.yaml, two.yaml]\n"), d / "two.yaml"


def _merge_key_in_included(d):  # reached only through a merge key inside an included file
    _write(d / "inc.yaml", "meta: &m {include: inner.yaml}\n<<: *m\n")
    _write(d / "inner.yaml", "process_docs: !function payload.process_docs\n")
    return _root(d, "include: inc.yaml\n"), d / "inner.yaml"


CASES = [_top, _metric_list, _in_list, _as_class, _anchor, _merge_key_include, _included, _nested_relative,
         _include_list, _merge_key_in_included]


@pytest.fixture(params=CASES, ids=lambda f: f.__name__.strip("_"))
def evil(request, tmp_path):
    task, holder = request.param(tmp_path)
    sentinel = tmp_path / "payload_ran"
    return {"task": task, "holder": holder.resolve(), "py": _payload(holder.parent, sentinel).resolve(),
            "sentinel": sentinel}


def _one_line(msg: str, *names) -> None:
    assert "\n" not in msg and "Traceback" not in msg, msg
    for n in names:
        assert str(n) in msg, msg


def test_task_code_anywhere_is_refused_by_the_lm_eval_config_and_runs_only_when_allowed(evil):
    from cuvee.evaltasks import EvalTaskError
    from cuvee.evaltasks.render import load_task_config

    with pytest.raises(EvalTaskError) as e:
        load_task_config(str(evil["task"]), allow_code=False)
    _one_line(str(e.value), evil["holder"], evil["py"])
    assert not evil["sentinel"].exists()
    said = []
    cfg = load_task_config(str(evil["task"]), allow_code=True, warn=said.append)
    assert evil["sentinel"].exists()  # allowed: the same references are imported, so the check found real code
    assert "include" not in cfg and any(str(evil["py"]) in s for s in said)


def test_decontaminate_resolution_reads_items_and_runs_no_task_code(evil):
    """The stage reads the task's data offline and never imports its code, so it needs no permission."""
    from cuvee.dedup.decontaminate import DecontaminateParams, resolve_sources

    (src,) = resolve_sources(DecontaminateParams(eval_sets=[{"task": str(evil["task"])}]))
    assert str(evil["holder"]) in src.inputs and str(evil["py"]) in src.inputs
    assert not evil["sentinel"].exists()


def _search(d: Path, target: dict) -> dict:
    for name in ("a", "b"):
        _write(d / f"{name}.jsonl", "".join(json.dumps({"text": f"{name} document {i} " * 20}) + "\n" for i in range(20)))
    return {"name": "s", "tokenizer": "bytes256.tiktoken", "seed": 0, "mixtures": 3,
            "sources": [{"name": n, "paths": str(d / f"{n}.jsonl")} for n in ("a", "b")], "targets": [target],
            "proxy": {"tokens": 64 * 8 * 6, "train": {
                "model": {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "max_seq_len": 64},
                "data": {"seq_len": 64}, "micro_batch": 8, "vocab_multiple": 1,
                "optim": {"lr": 5e-3, "warmup_steps": 1, "schedule": "cosine", "min_lr_ratio": 0.1}}},
            "proof": {"enabled": False}, "threads": 1}


def test_mix_search_validation_refuses_task_code_in_one_line(evil, tmp_path):
    from cuvee.mixsearch.config import SearchConfigError, load_search_config

    with pytest.raises(SearchConfigError) as e:
        load_search_config(_search(tmp_path / "s", {"name": "qa", "lm_eval": str(evil["task"])}))
    _one_line(str(e.value), evil["holder"])
    assert "runs no code from task files unless" in str(e.value)
    assert not evil["sentinel"].exists()


def test_an_overridden_function_still_counts(tmp_path):
    """lm-eval's own loader imports every !function of a file while reading it, even one a later key replaces."""
    from cuvee.evaltasks import EvalTaskError, checked_task

    _write(tmp_path / "inc.yaml", "doc_to_text: !function payload.f\n")
    _payload(tmp_path, tmp_path / "ran")
    with pytest.raises(EvalTaskError, match="inc.yaml runs Python from"):
        checked_task(str(_root(tmp_path, "include: inc.yaml\n")), allow_code=False)


def test_a_metric_script_through_hf_evaluate_is_task_code(tmp_path):
    """A metric lm-eval does not know is loaded with Hugging Face evaluate, which runs a local script as is."""
    pytest.importorskip("evaluate")
    from lm_eval.tasks import TaskManager

    from cuvee.evaltasks import EvalTaskError
    from cuvee.evaltasks.render import load_task_config, offline_env
    from cuvee.mixsearch.config import SearchConfigError, load_search_config

    sentinel = tmp_path / "metric_ran"
    script = _write(tmp_path / "m" / "m.py", "import evaluate\nimport datasets\n"
                    f"open({str(sentinel)!r}, 'w').write('ran')\n"
                    "class M(evaluate.Metric):\n    def _info(self):\n        return evaluate.MetricInfo(description='', "
                    "citation='', features=datasets.Features({'predictions': datasets.Value('int32'), "
                    "'references': datasets.Value('int32')}))\n    def _compute(self, predictions, references):\n"
                    "        return {'m': 1.0}\n")
    task = _root(tmp_path, "")
    task.write_text(task.read_text().replace("metric: acc", f"metric: {script}"))
    with pytest.raises(EvalTaskError) as e:
        load_task_config(str(task))
    _one_line(str(e.value), task.resolve(), "Hugging Face evaluate")
    with pytest.raises(SearchConfigError, match="Hugging Face evaluate"):
        load_search_config(_search(tmp_path / "s", {"name": "qa", "lm_eval": str(task)}))
    assert not sentinel.exists()
    cfg = load_task_config(str(task), allow_code=True, warn=lambda _line: None)
    with offline_env():
        TaskManager(include_defaults=False).load([cfg])
    assert sentinel.exists()  # the route is real: lm-eval ran the script while building the task


# ---- the constructed task ----------------------------------------------------------------------------------------
def test_lm_eval_builds_the_handed_dict_without_reading_the_yaml_again(tmp_path):
    """What was checked is what runs: the task files may even be gone once the dict exists."""
    from lm_eval.tasks import TaskManager

    from cuvee.evaltasks.render import load_task_config, offline_env

    _write(tmp_path / "base.yaml", "doc_to_text: '{{question}} ?'\ntask_list: [x]\n")
    task = _root(tmp_path, "include: [base.yaml]\n", drop=("doc_to_text",))
    cfg = load_task_config(str(task))
    assert "include" not in cfg and "task_list" not in cfg and cfg["doc_to_text"] == "{{question}} ?"
    task.unlink()
    (tmp_path / "base.yaml").unlink()
    with offline_env():
        built = TaskManager(include_defaults=False).load([cfg])["tasks"]["evil"]
    assert [built.doc_to_text(d) for d in built.eval_docs] == [r["question"] + " ?" for r in ROWS]


def test_construction_matches_lm_eval_on_merge_keys_anchors_and_includes(tmp_path):
    """An independent implementation: lm-eval's own load_yaml (functions not resolved) gives the same mapping."""
    from lm_eval.tasks._yaml_loader import load_yaml

    from cuvee.evaltasks.loader import FunctionRef, construct

    _write(tmp_path / "lib" / "base.yaml", "base: &b {fewshot_delimiter: '\\n\\n', target_delimiter: ' '}\n<<: *b\n"
                                            "include: more.yaml\ntask_list: [dropped]\nnum_fewshot: 1\n")
    _write(tmp_path / "lib" / "more.yaml", "num_fewshot: 3\nprocess_docs: !function utils.p\ngeneration_kwargs: "
                                            "{until: [a, b]}\n")
    _write(tmp_path / "other.yaml", "description: other\nnum_fewshot: 5\n")
    task = _root(tmp_path, "x: &anchor [1]\ncopy: *anchor\ninclude: [lib/base.yaml, other.yaml]\n")
    ours, files, refs = construct(task)

    def plain(v):
        if isinstance(v, FunctionRef):
            return str(v.base_dir / v.spec)  # lm-eval's text for a function it was told not to import
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, list) else v

    assert plain(ours) == load_yaml(task, resolve_func=False, recursive=True)
    assert ours["num_fewshot"] == 5 and "task_list" not in ours and ours["copy"] == [1]
    assert files == [task.resolve(), *(tmp_path / p for p in ("lib/base.yaml", "lib/more.yaml", "other.yaml"))]
    assert [r.spec for r in refs] == ["utils.p"] and refs[0].base_dir == tmp_path / "lib"


@pytest.mark.parametrize("files, expect", [
    ({"a.yaml": "include: b.yaml\n", "b.yaml": "include: a.yaml\n"}, "included twice"),
    ({"a.yaml": "include: [b.yaml, c.yaml]\n", "b.yaml": "include: c.yaml\n", "c.yaml": "x: 1\n"}, "included twice"),
    ({"a.yaml": "include: nowhere.yaml\n"}, "nowhere.yaml"),
    ({"a.yaml": "include: 3\n"}, "include must be a file path"),
    ({"a.yaml": "doc_to_text: !python/name:os.system x\n"}, "not valid YAML"),
    ({"a.yaml": "doc_to_text: !function {a: b}\n"}, "not valid YAML"),
    ({"a.yaml": "- a\n- b\n"}, "expected a mapping"),
])
def test_bad_task_files_are_one_line(tmp_path, files, expect):
    from cuvee.evaltasks import EvalTaskError
    from cuvee.evaltasks.loader import construct

    for name, text in files.items():
        _write(tmp_path / name, text)
    with pytest.raises(EvalTaskError) as e:
        construct(tmp_path / "a.yaml")
    _one_line(str(e.value), expect)


def test_include_depth_is_bounded(tmp_path):
    from cuvee.evaltasks import EvalTaskError
    from cuvee.evaltasks.loader import MAX_INCLUDE_DEPTH, construct

    for i in range(MAX_INCLUDE_DEPTH + 2):
        _write(tmp_path / f"{i}.yaml", f"include: {i + 1}.yaml\n")
    _write(tmp_path / f"{MAX_INCLUDE_DEPTH + 2}.yaml", "x: 1\n")
    with pytest.raises(EvalTaskError, match=f"deeper than {MAX_INCLUDE_DEPTH}"):
        construct(tmp_path / "0.yaml")
    assert construct(tmp_path / "2.yaml")[0] == {"x": 1}  # one file fewer than the limit allows


# ---- data files, names, stamps -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["$(touch {d}/pwned)", "{d}/$(id)", "`id`$", "${{HOME"])
def test_a_leftover_dollar_in_cuvee_eval_data_is_one_line_everywhere(tmp_path, monkeypatch, value):
    """issue #37: a $( in the variable gave 'unexpected AttributeError'; now one line, and nothing runs."""
    from cuvee.mixsearch.config import SearchConfigError, load_search_config
    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import RecipeError, parse_recipe

    monkeypatch.setenv("CUVEE_EVAL_DATA", value.format(d=tmp_path))
    recipe = {"name": "x", "input": {"paths": ["data/sample"]}, "run_dir": str(tmp_path / "run"),
              "stages": [{"stage": "decontaminate", "eval_sets": [{"task": "hellaswag_local"}]}]}
    with pytest.raises(RecipeError) as e:
        compile_recipe(parse_recipe(recipe))
    _one_line(str(e.value), "hellaswag_local", "still holds a '$'")
    with pytest.raises(SearchConfigError) as e:
        load_search_config(_search(tmp_path / "s", {"name": "qa", "lm_eval": "piqa_local"}))
    _one_line(str(e.value), "piqa_local", "still holds a '$'")
    assert not (tmp_path / "pwned").exists()


def test_unset_variable_and_relative_and_home_paths(tmp_path, monkeypatch):
    from cuvee.evaltasks import EvalTaskError, load_task

    monkeypatch.delenv("CUVEE_EVAL_DATA", raising=False)
    with pytest.raises(EvalTaskError, match=r"needs \$CUVEE_EVAL_DATA, which is not set"):
        load_task("arc_easy_local")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _write(tmp_path / "home" / "e" / "x.jsonl", json.dumps(ROWS[0]) + "\n")
    task = _root(tmp_path / "t", "")
    task.write_text(task.read_text().replace("test: items.jsonl", "test: ~/e/x.jsonl\n    val: items.jsonl"))
    t = load_task(str(task))
    assert t.data_files == {"test": str(tmp_path / "home/e/x.jsonl"), "val": str(tmp_path / "t/items.jsonl")}
    assert t.split_files() == (str(tmp_path / "home/e/x.jsonl"),) and t.split_files("val")[0].endswith("items.jsonl")
    with pytest.raises(EvalTaskError, match="split 'dev' not among its data_files"):
        t.split_files("dev")


def test_one_name_resolves_to_one_task_in_every_command(tmp_path, monkeypatch):
    """The decontaminate stage, lm-eval configs (eval-downstream, anneal downstream) and mix-search targets read
    the same files for the same name, shipped or the user's (an include list, unreadable before)."""
    from cuvee.dedup.decontaminate import DecontaminateParams, resolve_sources
    from cuvee.evaltasks import task_index
    from cuvee.evaltasks.render import load_task_config, resolve_target

    for name in ("hellaswag", "arc_easy", "arc_challenge", "piqa", "siqa", "openbookqa", "winogrande",
                 "commonsense_qa"):
        for split in ("validation", "test"):
            _write(tmp_path / "data" / name / f"{split}.jsonl", json.dumps({"question": "q", "x": "y"}) + "\n")
    monkeypatch.setenv("CUVEE_EVAL_DATA", str(tmp_path / "data"))
    _write(tmp_path / "mine" / "parts" / "prompt.yaml", "doc_to_text: '{{question}}'\n")
    _write(tmp_path / "mine" / "parts" / "data.yaml", "dataset_kwargs: {data_files: {test: ../items.jsonl}}\n")
    user = _root(tmp_path / "mine", "include: [parts/prompt.yaml, parts/data.yaml]\n", name="my_named_task")
    user.rename(tmp_path / "mine" / "file_stem.yaml")
    names = [*sorted(task_index()), "my_named_task"]
    for name in names:
        cfg = load_task_config(name, include_path=(str(tmp_path / "mine"),), allow_code=True, warn=lambda _l: None)
        files = cfg["dataset_kwargs"]["data_files"]
        split = cfg.get("test_split") or cfg.get("validation_split")
        (src,) = resolve_sources(DecontaminateParams(eval_sets=[{"task": name}], include_path=[str(tmp_path / "mine")]))
        assert list(src.files) == [files[split]], name
        if name != "my_named_task":  # a search has no include_path: the user's task is named by its YAML there
            assert resolve_target(name, None, False)["files"][-1] == files[split]
    assert resolve_target(str(tmp_path / "mine" / "file_stem.yaml"), None, False)["files"] == [
        str(tmp_path / "mine" / p) for p in ("file_stem.yaml", "parts/prompt.yaml", "parts/data.yaml", "items.jsonl")]


def test_every_file_a_task_reads_is_stamped_and_a_change_is_refused(tmp_path):
    """The decontaminate stage stamps the task's YAMLs, code and data (cuvee.kernel.stamps), not only its data."""
    from cuvee.dedup.decontaminate import BuildEvalIndex, Decontaminate, DecontaminateParams, resolve_sources
    from cuvee.evaltasks import EvalTaskError
    from cuvee.mixsearch.config import Target

    _write(tmp_path / "inc.yaml", "process_docs: !function payload.process_docs\n")
    _payload(tmp_path, tmp_path / "ran")
    task = _root(tmp_path, "include: inc.yaml\n")
    expect = [str(p.resolve()) for p in (task, tmp_path / "inc.yaml", tmp_path / "payload.py", tmp_path / "items.jsonl")]
    sources = resolve_sources(DecontaminateParams(eval_sets=[{"task": str(task)}]))
    assert list(sources[0].inputs) == expect
    assert Target(name="t", lm_eval=str(task), allow_task_code=True).as_mix_source().paths == expect
    list(BuildEvalIndex(tmp_path / "stage", sources, 13).run())
    step = Decontaminate(tmp_path / "stage", "drop", 1, "contamination")
    assert list(step.run(iter([]))) == []
    (tmp_path / "inc.yaml").write_text("process_docs: !function payload.f\n")  # same size, other content
    with pytest.raises(EvalTaskError) as e:
        list(Decontaminate(tmp_path / "stage", "drop", 1, "contamination").run(iter([])))
    _one_line(str(e.value), tmp_path / "inc.yaml", "--fresh")
    assert not (tmp_path / "ran").exists()


# ---- strict decoding of eval files ---------------------------------------------------------------------------------
ACCENTED = "Le garçon mangea une crème brûlée très sucrée au café près de la fenêtre pendant que son frère lisait"


@pytest.mark.parametrize("kind", ["txt", "csv", "jsonl", "jsonl.gz"])
def test_a_latin1_eval_file_is_refused_in_one_line_before_work(tmp_path, kind):
    """issue #37: read with errors='replace', the item lost every n-gram with an accented word and was counted
    checked and not found; now the file is refused in one line naming it and the line."""
    import gzip

    from cuvee.pipeline.compiler import compile_recipe
    from cuvee.pipeline.recipe import RecipeError, parse_recipe

    text = {"txt": f"first item\n{ACCENTED}\n", "csv": f"q\nfirst item\n{ACCENTED}\n",
            "jsonl": json.dumps({"q": "first"}) + "\n" + json.dumps({"q": ACCENTED}, ensure_ascii=False) + "\n"}
    data = text[kind.split(".")[0]].encode("latin-1")
    path = tmp_path / f"eval.{kind}"
    path.write_bytes(gzip.compress(data) if kind.endswith(".gz") else data)
    entry = {"path": str(path), **({"fields": ["q"]} if not kind.startswith("txt") else {})}
    recipe = {"name": "x", "input": {"paths": ["data/sample"]}, "run_dir": str(tmp_path / "run"),
              "stages": [{"stage": "decontaminate", "eval_sets": [entry]}]}
    with pytest.raises(RecipeError) as e:
        compile_recipe(parse_recipe(recipe))
    _one_line(str(e.value), path, f"not UTF-8 at line {3 if kind == 'csv' else 2}")


def test_utf8_with_a_bom_and_gzip_is_read_exactly(tmp_path):
    import gzip

    from cuvee.evaltasks import EvalTaskError, items

    body = json.dumps({"q": ACCENTED}, ensure_ascii=False) + "\n"
    gz = tmp_path / "e.jsonl.gz"
    gz.write_bytes(gzip.compress(b"\xef\xbb\xbf" + body.encode()))
    assert list(items.items(items.resolve(None, str(gz), None, ["q"], None))) == [("0", ACCENTED)]
    txt = _write(tmp_path / "t.txt", "")
    txt.write_bytes(b"\xef\xbb\xbf" + ACCENTED.encode() + b"\n")
    assert list(items.items(items.resolve(None, str(txt), None, None, None))) == [("0", ACCENTED)]
    cut = tmp_path / "cut.txt"
    cut.write_bytes(ACCENTED.encode()[:-1] + "é".encode()[:1])
    with pytest.raises(EvalTaskError, match="not UTF-8 at line 1 .* unexpected end of data"):
        items.resolve(None, str(cut), None, None, None)


def test_the_package_sits_on_the_kernel():
    """cuvee.evaltasks imports nothing from cuvee but the kernel and yaml_safe, and lm-eval (and the other
    optional libraries) only inside functions, so every command can resolve a task without them."""
    import ast
    import sys

    root = Path(__file__).resolve().parents[1] / "cuvee" / "evaltasks"
    allowed_top = {"yaml", "pydantic", "cuvee"}
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.startswith("cuvee"):
                    assert name.startswith(("cuvee.evaltasks", "cuvee.kernel", "cuvee.yaml_safe")), (path, name)
                elif id(node) in top and name != "__future__":
                    assert name.split(".")[0] in sys.stdlib_module_names | allowed_top, (path, name)
