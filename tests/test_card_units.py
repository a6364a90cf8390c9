"""Card building blocks that need no pipeline run: Hub metadata rules, bad inputs, empty plots."""

from __future__ import annotations

import json

import pytest

from cuvee.card.frontmatter import iso_language, size_category


@pytest.mark.parametrize(
    "n,label",
    [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (9_999, "1K<n<10K"), (10_000, "10K<n<100K"),
     (999_999, "100K<n<1M"), (1_000_000, "1M<n<10M"), (2_500_000_000, "1B<n<10B"), (10**13, "n>1T")],
)
def test_size_category_boundaries(n, label):
    assert size_category(n) == label


@pytest.mark.parametrize("raw,iso", [("en", "en"), ("__label__de", "de"), ("eng_Latn", "eng"), ("zh-Hans", "zh"), ("unknown", None), ("", None), ("und", None), ("x1", None)])
def test_iso_language(raw, iso):
    assert iso_language(raw) == iso


def test_not_a_run_dir_is_a_clear_error(tmp_path):
    from cuvee.card.run_data import CardInputError, load_run

    with pytest.raises(CardInputError, match="no such run directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(CardInputError, match="neither stats.json nor datatrove stats"):
        load_run(tmp_path)
    (tmp_path / "stats.json").write_text("{not json")
    with pytest.raises(CardInputError, match="not valid JSON"):
        load_run(tmp_path)


def test_bad_manifest_is_a_clear_error(tmp_path):
    from cuvee.card.run_data import CardInputError, load_manifest

    (tmp_path / "manifest.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(CardInputError, match="needs a 'sources' list"):
        load_manifest(tmp_path)
    with pytest.raises(CardInputError, match="no mixer manifest"):
        load_manifest(tmp_path / "nope")


def test_cli_reports_bad_run_dir_without_traceback(tmp_path):
    from click.testing import CliRunner

    from cuvee.cli import main

    res = CliRunner().invoke(main, ["card", str(tmp_path)])
    assert res.exit_code != 0 and "neither stats.json nor datatrove stats" in res.output
    assert "Traceback" not in res.output


def test_plots_skip_when_there_is_nothing_to_draw(tmp_path):
    from cuvee.card import plots

    assert plots.funnel_plot([], tmp_path / "f.png") is None
    assert plots.language_plot({}, tmp_path / "l.png") is None
    assert plots.score_plots({"x_score": []}, {}, tmp_path / "s.png") is None
    assert plots.mix_plot([], tmp_path / "m.png") is None
    assert not list(tmp_path.iterdir())


def test_threshold_linked_to_its_score_key():
    from cuvee.card.run_data import StageStats
    from cuvee.card.scores import thresholds_by_score

    def st(stage, **params):
        return StageStats(stage, 0, params, 10, 5, {}, None, None, {})

    linked, found = thresholds_by_score(
        [st("fasttext_quality", name="dclm", threshold=0.3), st("language_id", min_score=0.65), st("gopher", max_symbol_ratio=0.1), st("length", min_chars=10)],
        ["dclm_score", "language_score"],
    )
    assert linked == {"dclm_score": [("threshold", 0.3)], "language_score": [("min_score", 0.65)]}
    assert {(f["stage"], f["param"]) for f in found} == {("fasttext_quality", "threshold"), ("language_id", "min_score")}


def test_crawl_of_says_unknown_where_the_document_does_not_tell():
    from cuvee.card.profile import crawl_of

    assert crawl_of({"cc_snapshot": "CC-MAIN-2020-34"}) == "CC-MAIN-2020-34"
    assert crawl_of({"file_path": "crawl-data/CC-MAIN-2019-04/segments/x.warc.gz"}) == "CC-MAIN-2019-04"
    assert crawl_of({"warc_record_id": "arc:a.arc.gz:3", "date": "2008-06-19T01:02:03Z"}) == \
        "ARC archive (crawl not recorded, fetched 2008)"
    assert crawl_of({"file_path": "/data/x.arc.gz"}) == "ARC archive (crawl not recorded)"
    assert crawl_of({"url": "https://example.com/"}) == "unknown"
