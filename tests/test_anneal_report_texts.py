"""The anneal report's texts follow from the run: an arm whose documents' sources are unknown, in a config that
already sets ``order: window``, is reported with the reason alone, neither the advice to set ``order: window``
(meant for a refused ``order: pieces``) nor the mix folder's absolute path."""

from __future__ import annotations

from cuvee.train.arm_shares import measured_shares, shares_markdown, summarise
from cuvee.train.config import TrainConfig
from cuvee.train.demo_data import build_variant_mix, load_wcxb


def test_unknown_sources_under_order_window_give_the_reason_without_advice_or_path(tmp_path, monkeypatch):
    build_variant_mix(tmp_path / "demo", "demo", load_wcxb()[:30], {"clean": 0.5, "shuffled": 0.5},
                      max_doc_bytes=300)
    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig(name="arm", model={"dim": 32, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
                      data={"paths": ["demo"], "seq_len": 32, "order": "window"}, steps=2, micro_batch=2,
                      out_dir=str(tmp_path / "run"), threads=1)
    shares = measured_shares(cfg)
    method = shares["method"]
    assert method.startswith("not measured over the steps trained (the source of each document is unknown: in mix "
                             "folder 'demo', its manifest lists 2 sources"), method
    assert "order: window" not in method and "order: pieces" not in method
    assert str(tmp_path) not in method and str(tmp_path.resolve()) not in method
    report = {"shares": {"candidate": summarise({"0": shares})}, "seeds": [0], "sources": {}}
    md = "\n".join(shares_markdown(report))
    assert "order: window" not in md and str(tmp_path.resolve()) not in md and "folder 'demo'" in md
