"""Held-out metrics for quality classifiers: precision, recall, F1, accuracy and ROC-AUC.

ROC-AUC is computed from ranks (Mann-Whitney U with tied scores averaged), so no scikit-learn is needed.
"""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count one half)."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # average rank for ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def binary_metrics(labels, scores, threshold: float = 0.5) -> dict:
    """Metrics of the decision ``score >= threshold`` against boolean ``labels``, plus threshold-free ROC-AUC."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    pred = scores >= threshold
    tp = int((pred & labels).sum())
    fp = int((pred & ~labels).sum())
    fn = int((~pred & labels).sum())
    tn = int((~pred & ~labels).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "n": int(len(labels)),
        "positives": int(labels.sum()),
        "threshold": threshold,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "accuracy": round((tp + tn) / len(labels), 4) if len(labels) else 0.0,
        "roc_auc": round(roc_auc(labels, scores), 4),
    }


def regression_metrics(targets, preds, positive_at: float | None = None) -> dict:
    """MSE / Pearson for a regression head; with ``positive_at`` also binary metrics of target >= positive_at."""
    t = np.asarray(targets, dtype=np.float64)
    p = np.asarray(preds, dtype=np.float64)
    out = {"n": int(len(t)), "mse": round(float(np.mean((t - p) ** 2)), 4) if len(t) else float("nan")}
    out["pearson"] = round(float(np.corrcoef(t, p)[0, 1]), 4) if len(t) > 1 and t.std() > 0 and p.std() > 0 else float("nan")
    if positive_at is not None:
        out["binary"] = binary_metrics(t >= positive_at, p, threshold=positive_at)
    return out
