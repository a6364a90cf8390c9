"""Model folders never run their own code, and nothing downloads unless the user named a hub id (issue #25).

Real, tiny models saved locally (a BERT classifier, and a folder whose config.json carries ``auto_map`` with
a Python file that leaves a marker when imported); hub traffic is observed with a real HTTP server on
127.0.0.1 standing in for the hub (``HF_ENDPOINT``), in fresh processes so the setting takes effect.
"""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

WORDS = ["the", "a", "of", "and", "to", "in", "is", "was", "for", "on", "students", "learn", "science", "math", "history"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
    )

    root = tmp_path_factory.mktemp("bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab_file=str(root / "vocab.txt"), model_max_length=32)
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, num_labels=1,
                                                     problem_type="regression", max_position_embeddings=32))
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root / "model"


@pytest.fixture()
def with_auto_map(bert, tmp_path):
    """The BERT folder plus ``auto_map`` naming custom code that leaves a marker file when it runs."""
    import shutil

    folder = tmp_path / "custom"
    shutil.copytree(bert, folder)
    marker = tmp_path / "CODE_RAN"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                    "from transformers import PretrainedConfig\n"
                                    "class EvilConfig(PretrainedConfig):\n    model_type = 'cuvee_evil'\n")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="cuvee_evil", auto_map={"AutoConfig": "evil.EvilConfig",
                                                  "AutoModelForSequenceClassification": "evil.EvilModel",
                                                  "AutoModelForCausalLM": "evil.EvilModel", "AutoModel": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder, marker


def _refused(excinfo, folder):
    msg = str(excinfo.value)
    assert str(folder) in msg and "auto_map" in msg and "\n" not in msg


def test_every_loader_refuses_a_folder_with_custom_code(with_auto_map, tmp_path):
    from cuvee.classifiers.embedder import Encoder
    from cuvee.classifiers.hf_sequence import HFSequenceScorer, check_options
    from cuvee.classifiers.perplexity import PerplexityScorer

    folder, marker = with_auto_map
    with pytest.raises(ValueError) as e:
        HFSequenceScorer(str(folder), device="cpu").score_batch(["the students learn."])
    _refused(e, folder)
    with pytest.raises(ValueError) as e:  # recipe validation, before any work
        check_options(str(folder))
    _refused(e, folder)
    with pytest.raises(ValueError) as e:
        Encoder(str(folder), device="cpu").embed(["the students learn."])
    _refused(e, folder)
    with pytest.raises(ValueError) as e:
        PerplexityScorer(str(folder), device="cpu").score_batch(["the students learn."])
    _refused(e, folder)
    assert not marker.exists()


def test_a_built_in_architecture_still_loads(bert):
    from cuvee.classifiers.hf_sequence import HFSequenceScorer

    assert HFSequenceScorer(str(bert), device="cpu").score_batch(["the students learn.", "math"]).shape == (2,)


def _cuvee(args, env_extra, cwd, stdin=""):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "cuvee.classifiers.cli", *map(str, args)], input=stdin, cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_annotate_never_runs_model_code_even_if_stdin_says_yes(with_auto_map, tmp_path):
    folder, marker = with_auto_map
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "the students learn science."}) + "\n")
    res = _cuvee(["annotate", docs, "-m", folder, "-o", tmp_path / "ann.jsonl", "--n", 1, "--no-progress"],
                 {"HF_HOME": str(tmp_path / "hf_home")}, tmp_path, stdin="y\ny\ny\n")
    assert res.returncode == 1 and not marker.exists(), res.stderr
    err = res.stderr.strip()
    assert "\n" not in err and "auto_map" in err and str(folder) in err and "Traceback" not in err


@pytest.fixture()
def fake_hub():
    """A stand-in for huggingface.co on 127.0.0.1 that records every request and answers 404."""
    seen = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _any(self):
            seen.append(self.path)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_POST = _any

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()


def test_downloads_only_for_a_hub_id_and_never_offline(fake_hub, tmp_path):
    url, seen = fake_hub
    (tmp_path / "models").mkdir()  # `models/missing` is a typo'd local path, not a hub repository
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "a", "text": "the students learn science."}) + "\n")
    env = {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf_home")}

    def annotate(model, **extra):
        res = _cuvee(["annotate", docs, "-m", model, "-o", tmp_path / "ann.jsonl", "--n", 1, "--no-progress"],
                     {**env, **extra}, tmp_path)
        err = res.stderr.strip()
        assert res.returncode == 1 and "\n" not in err and "Traceback" not in err, res.stderr
        return err

    err = annotate("models/missing")
    assert "no such model folder" in err and seen == []
    err = annotate("someorg/somemodel", HF_HUB_OFFLINE="1")
    assert "HF_HUB_OFFLINE" in err and seen == []
    annotate("someorg/somemodel")  # named as a hub id, online: asking the hub is what the user asked for
    assert any("someorg/somemodel" in p for p in seen)
