"""Nothing in a model folder or a task file runs as code: a Hugging Face folder whose config maps classes to
its own Python (``auto_map``) is refused in one line, and an lm-eval task YAML with ``!function`` is refused
unless --allow-task-code is given (then each file is named on stderr). Real model folders, real task files."""

import json
import shutil

import pytest
from click.testing import CliRunner

from cuvee.evaltasks import EvalTaskError, checked_task
from cuvee.train.cli import eval_downstream
from cuvee.train.config import ModelConfig
from cuvee.train.demo_data import BYTE_TOKENIZER
from cuvee.train.hf_export import export_hf
from cuvee.train.lm_eval_backend import CLOZE_DATA
from cuvee.train.model import Llama

pytest.importorskip("lm_eval")

MARKER_CODE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small real Llama folder (config.json, model.safetensors, tokenizer files), saved locally."""
    cfg = ModelConfig(vocab_size=257, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, max_seq_len=512)
    return export_hf(Llama(cfg), cfg, tmp_path_factory.mktemp("hf") / "model", BYTE_TOKENIZER)


def _one_line(res):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


def _task(folder, head="", data_rows=3):
    folder.mkdir(parents=True, exist_ok=True)
    rows = CLOZE_DATA.read_text().splitlines()[:data_rows]
    (folder / "items.jsonl").write_text("\n".join(rows) + "\n")
    body = ("task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: items.jsonl\n"
            "test_split: test\noutput_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
            "doc_to_target: label\nmetric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    (folder / "mine.yaml").write_text(head + body)
    return folder / "mine.yaml"


def test_model_folder_with_auto_map_is_refused_without_running_its_code(model_dir, tmp_path):
    evil = tmp_path / "evil_model"
    shutil.copytree(model_dir, evil)
    marker = tmp_path / "model_code_ran"
    (evil / "modeling_evil.py").write_text(MARKER_CODE.format(marker=str(marker)))
    cfg = json.loads((evil / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (evil / "config.json").write_text(json.dumps(cfg))
    line = _one_line(CliRunner().invoke(eval_downstream, [str(evil), "--task", "cuvee_wcxb_cloze", "--limit", "2"]))
    assert str(evil) in line and "auto_map" in line and "trust_remote_code=False" in line
    assert not marker.exists()


def test_task_file_with_function_is_refused_unless_allowed(model_dir, tmp_path):
    marker = tmp_path / "task_code_ran"
    task = _task(tmp_path / "task", head="process_docs: !function helpers.process_docs\n")
    (task.parent / "helpers.py").write_text(MARKER_CODE.format(marker=str(marker))
                                            + "def process_docs(ds):\n    return ds\n")
    line = _one_line(CliRunner().invoke(eval_downstream, [str(model_dir), "--task", str(task), "--limit", "2"]))
    assert str(task.parent / "helpers.py") in line and "--allow-task-code" in line
    assert not marker.exists()

    res = CliRunner().invoke(eval_downstream, [str(model_dir), "--task", str(task), "--limit", "2",
                                               "--allow-task-code"])
    assert res.exit_code == 0, res.output
    warnings = [w for w in res.stderr.splitlines() if w.startswith("warning: --allow-task-code")]
    assert len(warnings) == 1 and str(task.parent / "helpers.py") in warnings[0]
    assert marker.exists()  # allowed, named, and run
    assert json.loads(res.stdout)["mine"]["samples"] == 2


def test_function_reached_through_include_is_found(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("doc_to_text: !function helpers.text\n")
    task = _task(tmp_path / "t", head=f"include: {base}\n")
    with pytest.raises(EvalTaskError, match="helpers.text"):
        checked_task(str(task), allow_code=False)


def test_shipped_tasks_are_trusted_and_a_task_without_code_needs_no_flag(tmp_path):
    """cuvee's shipped !function helpers are its own code, also when a user's task includes a shipped file (which
    adds none of its own); a task without !function needs no flag."""
    import yaml

    from cuvee.evaltasks import TASKS_DIR, FunctionRef

    plain = _task(tmp_path / "plain")
    assert checked_task(str(plain), allow_code=False).code == []
    user = tmp_path / "mine_wino.yaml"
    user.write_text(yaml.safe_dump({"include": str(TASKS_DIR / "fineweb_early_signal" / "winogrande_local.yaml"),
                                    "dataset_kwargs": {"data_files": str(plain.parent / "items.jsonl")}}))
    task = checked_task(str(user), allow_code=False)
    assert task.code == [] and isinstance(task.config["doc_to_text"], FunctionRef) and "include" not in task.config


def test_alias_bomb_task_file_is_one_line(model_dir, tmp_path):
    bomb = "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
                   for p, k in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg"))
    task = _task(tmp_path / "bomb", head=bomb)
    line = _one_line(CliRunner().invoke(eval_downstream, [str(model_dir), "--task", str(task)]))
    assert "alias bomb" in line


def test_function_reached_through_a_merge_key_include_is_refused_and_never_runs(model_dir, tmp_path):
    """issue #37: `include:` arriving through a YAML merge key was invisible to the check, and lm-eval imported the
    included file's !function module; eval-downstream now refuses it in one line naming both files."""
    marker = tmp_path / "task_code_ran"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "inc.yaml").write_text("process_docs: !function helpers.process_docs\n")
    (tmp_path / "t" / "helpers.py").write_text(MARKER_CODE.format(marker=str(marker))
                                              + "def process_docs(ds):\n    return ds\n")
    task = _task(tmp_path / "t", head="metadata: &b {include: inc.yaml}\n<<: *b\n")
    line = _one_line(CliRunner().invoke(eval_downstream, [str(model_dir), "--task", str(task), "--limit", "2"]))
    assert str(tmp_path / "t" / "inc.yaml") in line and str(tmp_path / "t" / "helpers.py") in line
    assert "--allow-task-code" in line and not marker.exists()


def test_a_shell_expression_in_cuvee_eval_data_is_one_line(model_dir, tmp_path, monkeypatch):
    """issue #37: '$(' left after expanding CUVEE_EVAL_DATA gave 'unexpected AttributeError'."""
    monkeypatch.setenv("CUVEE_EVAL_DATA", f"$(touch {tmp_path}/pwned)")
    line = _one_line(CliRunner().invoke(eval_downstream, [str(model_dir), "--task", "piqa_local", "--limit", "2"]))
    assert "piqa_local" in line and "still holds a '$'" in line and "unexpected" not in line
    assert not (tmp_path / "pwned").exists()
