"""Helpers for the FineWeb early-signal task templates (referenced with ``!function`` from the YAMLs).

Adapted from lm-evaluation-harness (MIT): lm_eval/tasks/hellaswag/utils.py and
lm_eval/tasks/winogrande/preprocess_winogrande.py, so scores match lm-eval's own hellaswag / winogrande.
"""

import re


def _hellaswag_clean(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")  # WikiHow artefacts
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag_process_docs(dataset):
    def _doc(doc):
        ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
        return {"query": _hellaswag_clean(doc["activity_label"] + ": " + ctx),
                "choices": [_hellaswag_clean(e) for e in doc["endings"]],
                "gold": int(doc["label"])}

    return dataset.map(_doc)


def winogrande_doc_to_text(doc):
    return {"1": 0, "2": 1}[str(doc["answer"])]


def winogrande_doc_to_target(doc):
    idx = doc["sentence"].index("_") + 1
    return doc["sentence"][idx:].strip()


def winogrande_doc_to_choice(doc):
    idx = doc["sentence"].index("_")
    return [doc["sentence"][:idx] + opt for opt in (doc["option1"], doc["option2"])]
