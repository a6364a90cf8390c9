"""LID accuracy: cuvee's language stage model (fastText lid.176) on lingua's test sets, next to the
published CLD2 / CLD3 / langdetect / langid / lingua accuracies on exactly the same items.

    python benchmarks/bench_lid.py [--data /work/shared/data/langid_lingua] [--markdown out.md]

Accuracy per language = share of lines predicted as the file's language (top-1). Means are macro means;
each peer is compared on the languages that both it and lid.176 support.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuvee.filters.language import load_lid_model, normalise_for_lid

NAMES = {  # lingua's report names -> ISO 639-1 (the test files' names)
    "Afrikaans": "af", "Albanian": "sq", "Arabic": "ar", "Armenian": "hy", "Azerbaijani": "az", "Basque": "eu",
    "Belarusian": "be", "Bengali": "bn", "Bokmal": "nb", "Bosnian": "bs", "Bulgarian": "bg", "Catalan": "ca",
    "Chinese": "zh", "Croatian": "hr", "Czech": "cs", "Danish": "da", "Dutch": "nl", "English": "en",
    "Esperanto": "eo", "Estonian": "et", "Finnish": "fi", "French": "fr", "Ganda": "lg", "Georgian": "ka",
    "German": "de", "Greek": "el", "Gujarati": "gu", "Hebrew": "he", "Hindi": "hi", "Hungarian": "hu",
    "Icelandic": "is", "Indonesian": "id", "Irish": "ga", "Italian": "it", "Japanese": "ja", "Kazakh": "kk",
    "Korean": "ko", "Latin": "la", "Latvian": "lv", "Lithuanian": "lt", "Macedonian": "mk", "Malay": "ms",
    "Maori": "mi", "Marathi": "mr", "Mongolian": "mn", "Nynorsk": "nn", "Persian": "fa", "Polish": "pl",
    "Portuguese": "pt", "Punjabi": "pa", "Romanian": "ro", "Russian": "ru", "Serbian": "sr", "Shona": "sn",
    "Slovak": "sk", "Slovene": "sl", "Somali": "so", "Sotho": "st", "Spanish": "es", "Swahili": "sw",
    "Swedish": "sv", "Tagalog": "tl", "Tamil": "ta", "Telugu": "te", "Thai": "th", "Tsonga": "ts",
    "Tswana": "tn", "Turkish": "tr", "Ukrainian": "uk", "Urdu": "ur", "Vietnamese": "vi", "Welsh": "cy",
    "Xhosa": "xh", "Yoruba": "yo", "Zulu": "zu",
}
# lid.176 labels that count as the gold code (lid.176 uses 'no' for Norwegian Bokmål, 'he' in its label set)
ALIASES = {"nb": {"nb", "no"}}
PEERS = ["cld2", "cld3", "langdetect", "langid", "lingua-high-accuracy", "lingua-low-accuracy"]


def published(path: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            code = NAMES[row["language"]]
            out[code] = {p: float(row[p]) for p in PEERS if row.get(p) not in (None, "", "NaN")}
            out[code] = {p: v for p, v in out[code].items() if not math.isnan(v)}
    return out


def evaluate(model, folder: Path, supported: set[str]) -> tuple[dict[str, float], int, float]:
    acc: dict[str, float] = {}
    n = 0
    t0 = time.perf_counter()
    for f in sorted(folder.glob("*.txt")):
        gold = f.stem
        if not (ALIASES.get(gold, {gold}) & supported):
            continue
        lines = [normalise_for_lid(ln) for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        ok = ALIASES.get(gold, {gold})
        hits = 0
        for ln in lines:
            lab = model.f.predict(ln + "\n", 1, 0.0, "replace")[0][1][len("__label__"):]
            hits += lab in ok
        acc[gold] = 100.0 * hits / len(lines)
        n += len(lines)
    return acc, n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/langid_lingua")
    ap.add_argument("--markdown", default=None, help="also write the tables to this file")
    args = ap.parse_args()
    data = Path(args.data)
    model = load_lid_model()
    supported = {lab[len("__label__"):] for lab in model.get_labels()}
    md: list[str] = []

    def emit(line: str = "") -> None:
        print(line)
        md.append(line)

    for kind in ("sentences", "word-pairs", "single-words"):
        acc, n, secs = evaluate(model, data / kind, supported)
        pub = published(data / f"{kind}-accuracy-values.csv")
        unsupported = sorted(set(NAMES.values()) - set(acc))
        emit(f"### {kind}: fastText lid.176 (cuvee `language` stage) vs published detectors")
        emit()
        emit(f"{n} items, {len(acc)} languages supported by lid.176, {n / secs:,.0f} items/s; "
             f"not in lid.176: {', '.join(unsupported)}")
        emit()
        emit("| detector | languages compared | detector mean % | lid.176 mean % on same languages | lid.176 / detector |")
        emit("|---|---|---|---|---|")
        emit(f"| **lid.176 (ours)** | {len(acc)} | {sum(acc.values()) / len(acc):.1f} | - | - |")
        for p in PEERS:
            common = [c for c in acc if p in pub.get(c, {})]
            if not common:
                continue
            peer = sum(pub[c][p] for c in common) / len(common)
            ours = sum(acc[c] for c in common) / len(common)
            emit(f"| {p} | {len(common)} | {peer:.1f} | {ours:.1f} | {ours / peer:.3f} |")
        emit()
        if kind == "sentences":
            emit("Per language (sentences), accuracy %:")
            emit()
            emit("| lang | lid.176 | " + " | ".join(PEERS) + " |")
            emit("|---|---|" + "---|" * len(PEERS))
            for c in sorted(acc):
                cells = [f"{pub.get(c, {}).get(p):.1f}" if p in pub.get(c, {}) else "-" for p in PEERS]
                emit(f"| {c} | {acc[c]:.1f} | " + " | ".join(cells) + " |")
            emit()
    if args.markdown:
        Path(args.markdown).write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
