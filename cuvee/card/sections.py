"""The Markdown body of the card, section by section, in the order of FineWeb's card.

Every number is taken from ``stats.json`` / the manifest where they hold it (documents, drop reasons,
languages, mix tokens) and from the output scan otherwise (scores, snapshots, token estimates); the
text says which numbers are estimates. Sections for stages that did not run are replaced by a line
saying so, which is what makes partial runs give honest cards. Every value from data or configs goes
through ``cuvee.card.escape`` (``text``/``code``, and ``table`` escapes its cells), so it shows as text
wherever the Markdown is rendered.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from cuvee.card.chosen_by import chosen_by_lines
from cuvee.card.escape import Md, cell, code, text
from cuvee.card.frontmatter import iso_language
from cuvee.card.funnel import funnel_rows, is_dedup_stage
from cuvee.card.profile import OutputProfile
from cuvee.card.run_data import RunData
from cuvee.card.scores import summarize, thresholds_by_score

STANDARD_COUNTERS = {"total", "forwarded", "dropped", "doc_len", "documents", "batches", "input_files"}


def n(v: Any) -> str:
    """Integers with thousands separators; '–' for unknown."""
    if v is None:
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    return f"{int(v):,}"


def pct(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "–"
    return f"{100.0 * part / whole:.1f}%"


def _cell(s: Any) -> str:
    return cell(s).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _number(v: Any, fmt: str = "{:.2f}") -> str:
    """A manifest number formatted, or the value escaped as code when it is not one (manifests are not trusted)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return fmt.format(v)
    return "–" if v is None else code(v)


def _selections(selections: Any) -> list[str]:
    """A table per source with ``selections:``: each selection's where, weight, realised share and epochs."""
    if not isinstance(selections, dict) or not selections:
        return []
    lines = ["\nSelections (`where:` on document metadata; each selection is blended as a source of its own, "
             "named source.selection above):"]
    for source, info in selections.items():
        info = info if isinstance(info, dict) else {}
        rows = [[code(sel.get("name")), code(_fmt_param(sel.get("where"))),
                 _number(sel.get("weight"), "{:.3f}"), _number(sel.get("realised_share"), "{:.2%}"),
                 _number(sel.get("epochs")), _number(sel.get("max_epochs")), _number(sel.get("documents"), "{:,}"),
                 _number(sel.get("realised_tokens"), "{:,}")]
                for sel in info.get("selections") or [] if isinstance(sel, dict)]
        lines.append(f"\nSource {code(source)}: {_number(info.get('documents_read'), '{:,}')} documents read, "
                     f"{_number(info.get('documents_left_out'), '{:,}')} taken by no selection (left out).\n")
        lines.append(table(["selection", "where", "weight", "realised share", "epochs", "max epochs", "documents",
                            "realised tokens"], rows))
    return lines


def _fmt_param(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        s = ", ".join(map(str, v[:6])) + (f", … ({len(v)} items)" if len(v) > 6 else "")
        return f"[{s}]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt_param(x)}" for k, x in list(v.items())[:6]) + ("…" if len(v) > 6 else "") + "}"
    return str(v)


class CardWriter:
    """Builds the Markdown body from a loaded run, its output profile and the written plot files."""

    def __init__(self, run: RunData, prof: OutputProfile, images: dict[str, str], tokens_estimated: bool = True,
                 after_mix: list[str] | None = None):
        self.run, self.prof, self.images = run, prof, images
        self.after_mix = list(after_mix or [])  # sections of a mix or training folder's card (provenance)
        self.stats = run.stats
        self.out = self.stats.get("output") or {}
        self.acc = self.stats.get("accounting") or {}
        self.tokens_per_char = (prof.tokens_est / prof.chars) if (prof.chars and prof.tokens_est) else None

    # -- helpers -------------------------------------------------------------------------------
    @property
    def documents(self) -> int:
        d = self.out.get("documents")
        return int(d) if d is not None else self.prof.documents

    @property
    def languages(self) -> dict[str, int]:
        """Documents per language label: stats.json's count, else the outputs' ``language`` metadata."""
        langs = self.out.get("languages")
        if langs:
            return {str(k): int(v) for k, v in langs.items()}
        return {} if set(self.prof.languages) <= {"unknown"} else dict(self.prof.languages)

    @property
    def hub_languages(self) -> list[str]:
        """Labels for the front matter, most frequent first; Common Crawl's CLD2 labels when no language ID ran."""
        langs = self.languages or dict(self.prof.cc_languages)
        return [k for k, _ in sorted(langs.items(), key=lambda kv: (-kv[1], kv[0]))]

    def crawls(self) -> str:
        """Where the output documents came from, with counts: " (crawls: CC-MAIN-2020-34: 1 document; ...)"."""
        if not self.prof.snapshots:
            return " (crawls not known: no output document was read)"
        items = sorted(self.prof.snapshots.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = [f"{text(k)}: {n(v)} document{'s' if v != 1 else ''}" for k, v in items[:6]]
        if len(items) > 6:
            parts.append(f"{len(items) - 6} more, see Sources")
        return " (crawls: " + "; ".join(parts) + ")"

    def img(self, key: str, alt: str) -> str:
        return f"![{alt}]({self.images[key]})\n" if key in self.images else ""

    # -- sections ------------------------------------------------------------------------------
    def title(self) -> str:
        return f"# {text(self.run.name)}\n"

    def partial_banner(self) -> str:
        if self.run.complete:
            return ""
        ran = ", ".join(text(s.name) for s in self.run.stages) or "none"
        planned = [s.get("stage") for s in (self.run.recipe.get("stages") or []) if isinstance(s, dict)]
        missing = [p for p in planned if p not in {s.name for s in self.run.stages}]
        lines = [
            ("> **Partial run.** This card describes a run that did not complete (`complete: false`). "
             f"Only the stages that ran are described: {ran}.")
        ]
        if missing:
            lines.append(f"> Stages in the recipe that did not report: {', '.join(text(m) for m in missing)}.")
        lines.append("> Counts cover only the work that finished; do not publish this data as the full recipe's output.")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        langs = self.languages
        top = sorted(langs.items(), key=lambda kv: -kv[1])[:3]
        read = self.acc.get("records_read")
        parts = [
            "## Dataset summary\n",
            f"**{text(self.run.name)}** is a web-text pretraining dataset of **{n(self.documents)} documents** "
            + (f"(about **{n(self.prof.tokens_est)} tokens**, estimated with {self.prof.tokenizer}) " if self.prof.tokens_est else "")
            + (f"in {len(langs)} language(s)" + (" (mostly " + ", ".join(f"{code(k)} {pct(v, sum(langs.values()))}" for k, v in top) + ")") if top else "(language not identified by the pipeline)")
            + ", extracted and filtered from web crawl archives"
            + self.crawls()
            + f" by the cuvee recipe {code(self.run.name)}.",
        ]
        if read is not None:
            parts.append(
                f"\nOf **{n(read)}** input records, **{n(self.acc.get('kept'))}** were kept and **{n(self.acc.get('dropped'))}** dropped "
                f"({pct(self.acc.get('dropped'), read)}); every dropped record is counted under a reason in the funnel below"
                + (" and the accounting balances." if self.acc.get("balanced") else ".")
            )
        if self.out.get("chars") is not None:
            parts.append(f"\nOutput size: {n(self.out.get('chars'))} characters in {n(len(self.run.output_files))} file(s), format {code(self.out.get('format', '?'))}.")
        parts.append(
            "\nIt is meant for pretraining language models (task category `text-generation`). "
            "Each row has `text`, `id` and `metadata` (url, date, language, language_score, scores of the classifiers that ran)."
        )
        return "\n".join(parts) + "\n"

    def sources(self) -> str:
        snaps = self.prof.snapshots
        rec_paths = [str(p) for p in (self.run.recipe.get("input") or {}).get("paths") or []]
        lines = ["## Sources\n"]
        if snaps:
            lines.append("The crawl each **output** document came from (its `cc_snapshot` metadata or WARC file name; ARC files, "
                         "the format of Common Crawl's 2008-2012 crawls, record no crawl name; `unknown` where the "
                         "document says nothing):\n")
            rows = [[k, n(v), pct(v, self.prof.documents)] for k, v in sorted(snaps.items(), key=lambda kv: (-kv[1], kv[0]))]
            lines.append(table(["crawl", "documents", "share"], rows))
            lines.append("")
        if rec_paths:
            inp = self.run.recipe.get("input") or {}
            lines.append(f"Input ({code(inp.get('format', 'auto'))}), as given in the recipe:\n")
            lines += [f"- {code(p)}" for p in rec_paths[:20]]
            if len(rec_paths) > 20:
                lines.append(f"- … and {len(rec_paths) - 20} more")
            lines.append("")
        reader = self.run.stages[0] if self.run.stages else None
        said = []
        if self.acc.get("records_read") is not None:
            said.append(f"Records read: **{n(self.acc['records_read'])}**.")
        if reader is not None and reader.dropped:
            said.append(
                f"The reader ({code(reader.name)}) passed on {n(reader.docs_out)} of {n(reader.docs_in)} records; the rest were not documents: "
                + ", ".join(f"{text(k)} {n(v)}" for k, v in sorted(reader.dropped.items(), key=lambda kv: -kv[1]))
                + "."
            )
        if said:
            lines.append(" ".join(said))
        if self.prof.domains:
            top = self.prof.domains.most_common(10)
            lines.append(f"\n{n(len(self.prof.domains))} distinct hosts; the 10 most frequent hold {pct(sum(v for _, v in top), self.prof.documents)} of documents:\n")
            lines.append(table(["host", "documents"], [[h or "(none)", n(v)] for h, v in top]))
        return "\n".join(lines) + "\n"

    def processing(self) -> str:
        st = self.stats
        lines = ["## Processing\n", f"Recipe {code(self.run.name)}, SHA-256 {code(st.get('recipe_sha256', 'unknown'))}."]
        ex = st.get("executor") or (self.run.recipe.get("executor") or {})
        if ex:
            lines.append(
                f" Executor: {code(ex.get('kind', '?'))} with {text(ex.get('tasks', '?'))} task(s)"
                + (f" / {text(ex.get('workers'))} worker(s)" if ex.get("workers") not in (None, -1) else "")
                + (" (stats merged across tasks)." if (ex.get("tasks") or 1) > 1 else ".")
            )
        if st.get("started"):
            lines.append(f" Started {text(st.get('started'))}, finished {text(st.get('finished', '–'))}, wall time {n(st.get('wall_time_s'))} s.")
        lines.append(f" Statistics source: {self.run.stats_origin}.\n")
        rows = []
        for i, s in enumerate(self.run.stages):
            params = "; ".join(f"{k}={_fmt_param(v)}" for k, v in s.params.items()) or "(defaults)"
            rows.append([f"{i + 1:02d}", code(s.name), "–" if s.segment is None else s.segment, params, n(s.time_s)])
        if rows:
            lines.append(table(["#", "stage", "segment", "parameters", "time (s)"], rows))
        else:
            lines.append("No stage reported statistics.")
        versions = {"cuvee": st.get("cuvee_version", "unknown"), **(st.get("versions") or {})}
        lines.append("\nSoftware versions:\n")
        lines.append(table(["package", "version"], [[k, v] for k, v in versions.items()]))
        if self.run.recipe_source:
            # a fence longer than any backtick run in the recipe: nothing inside can close it
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", self.run.recipe_source)), default=0))
            lines.append(
                f'\n<details markdown="1"><summary>The recipe as run (<code>recipe.yaml</code>)</summary>\n\n{fence}yaml\n'
                + self.run.recipe_source.rstrip() + f"\n{fence}\n\n</details>"
            )
        return "\n".join(lines) + "\n"

    def funnel(self) -> str:
        rows = funnel_rows(self.run.stages, self.tokens_per_char)
        lines = ["## Filter funnel\n"]
        if not rows:
            return "\n".join(lines + ["No stage statistics were recorded for this run.\n"])
        lines.append(self.img("funnel", "Filter funnel: documents kept and dropped per stage"))
        first_in = next((r["docs_in"] for r in rows if r["docs_in"] is not None), None)
        body = []
        for r in rows:
            reasons = ", ".join(f"{k}: {n(v)}" for k, v in r["reasons"].items()) or ("–" if not r["dropped"] else "(no reason recorded)")
            body.append([r["label"], n(r["docs_in"]), n(r["docs_out"]), n(r["dropped"]), pct(r["dropped"], first_in), reasons, n(r["chars_out"]), n(r["tokens_out_est"]), n(r["tokens_dropped_est"])])
        lines.append(table(["stage", "docs in", "docs out", "dropped", "dropped (% of input)", "drop reasons", "chars out", "tokens out (est.)", "tokens dropped (est.)"], body))
        lines.append(
            "\nDocument counts are exact (datatrove counters, summed over tasks). "
            + ("Token columns are estimates: characters × the tokens-per-character ratio of the output"
               + (f" ({self.tokens_per_char:.3f} tokens/char, {self.prof.tokenizer})." if self.tokens_per_char else ".")
               if self.tokens_per_char else "No token estimate is available (no output documents or tokenizer).")
        )
        html_rows = [r["label"] for r in rows if r["chars_out"] is not None and r["tokens_out_est"] is None]
        if html_rows and self.tokens_per_char:
            lines.append(f" Stages up to text extraction ({', '.join(text(r) for r in html_rows)}) carry HTML, so no token estimate is given for them.")
        acc = self.acc
        if acc:
            lines.append(
                f"\nAccounting: records read {n(acc.get('records_read'))} = kept {n(acc.get('kept'))} + dropped {n(acc.get('dropped'))}"
                f" → {'balanced ✓' if acc.get('balanced') else 'NOT balanced ✗'}."
            )
            by = acc.get("by_reason") or {}
            if by:
                lines.append("\nAll drop reasons over the run:\n")
                lines.append(table(["stage/reason", "records"], [[k, n(v)] for k, v in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))]))
        return "\n".join(lines) + "\n"

    def language(self) -> str:
        langs = self.languages
        lines = ["## Language distribution\n"]
        if not langs:
            lines.append("No language-ID stage ran, so documents carry no `language` label.")
            cc = self.prof.cc_languages
            if cc:
                lines.append(" Common Crawl's own CLD2 identification (`cc_languages` metadata, first language listed) gives:\n")
                lines.append(self.img("languages", "Documents per Common Crawl CLD2 language"))
                rows = [[code(k), n(v), pct(v, self.prof.documents)] for k, v in sorted(cc.items(), key=lambda kv: (-kv[1], kv[0]))]
                missing = self.prof.documents - sum(cc.values())
                if missing:
                    rows.append(["not recorded (e.g. ARC crawls)", n(missing), pct(missing, self.prof.documents)])
                lines.append(table(["CLD2 label", "documents", "share"], rows))
            return "\n".join(lines) + "\n"
        lines.append(self.img("languages", "Documents per language"))
        total = sum(langs.values())
        rows = []
        for lab, c in sorted(langs.items(), key=lambda kv: (-kv[1], kv[0])):
            tok = self.prof.tokens_by_language.get(lab)
            rows.append([code(lab), iso_language(lab) or "–", n(c), pct(c, total), n(tok) if tok is not None else "–"])
        lines.append(table(["label", "ISO 639", "documents", "share", "tokens (est.)"], rows))
        src = "`stats.json` (`output.languages`)" if self.out.get("languages") else "the output documents' `language` metadata"
        lines.append(f"\nDocument counts per language come from {src}.")
        return "\n".join(lines) + "\n"

    def dedup(self) -> str:
        stages = [(i, s) for i, s in enumerate(self.run.stages) if is_dedup_stage(s)]
        lines = ["## Deduplication\n"]
        if not stages:
            return "\n".join(lines + ["No deduplication stage ran, so the data may contain duplicate and near-duplicate documents.\n"])
        rows = []
        for i, s in stages:
            extra = ", ".join(f"{k}={n(v) if isinstance(v, (int, float)) else v}" for k, v in sorted(s.counters.items()) if k not in STANDARD_COUNTERS and not k.startswith("dropped")) or "–"
            rows.append([Md(f"{i + 1:02d} {code(s.name)}"), n(s.docs_in), n(s.dropped_total), pct(s.dropped_total, s.docs_in), extra])
        lines.append(table(["stage", "docs in", "docs removed", "removed", "counters"], rows))
        phases = self.stats.get("phases") or []
        if phases:
            lines.append("\nWhole-corpus phases:\n")
            lines.append(table(["phase", "time (s)", "counters"], [[p.get("name"), n(p.get("time_s")), ", ".join(f"{k}={n(v) if isinstance(v, (int, float)) else v}" for k, v in (p.get("counters") or {}).items()) or "–"] for p in phases]))
        lines.append("\nDeduplication is within this run only (not across other datasets or snapshots processed elsewhere).")
        return "\n".join(lines) + "\n"

    def contamination(self) -> str:
        """Whether the documents were checked against evaluation sets: says so plainly when they were not."""
        ran = [st for st in self.run.stages if "contamin" in st.name.lower()]
        if not ran:
            return ("## Contamination\n\nNo decontamination stage ran: the documents were not checked against "
                    "benchmark or evaluation sets, so they may contain test items of public benchmarks. "
                    "Decontaminate before evaluating a model trained on this data.\n")
        rows = [[code(st.name), n(st.docs_in), n(st.dropped_total)] for st in ran]
        lines = ["## Contamination\n", table(["stage", "docs in", "docs removed"], rows)]
        for rep in self.stats.get("contamination") or []:  # per benchmark, from the decontaminate stage's report
            meaning = rep.get("by_meaning") or None
            extra = (lambda b: [n(b.get("items_found_by_meaning")), n(b.get("documents_touched_by_meaning"))]) \
                if meaning else (lambda b: [])
            bench = [[code(name), n(b.get("items_checked")), n(b.get("too_short")), n(b.get("items_found")),
                      n(b.get("documents_touched")), *extra(b), code(rep.get("action"))]
                     for name, b in sorted((rep.get("benchmarks") or {}).items())]
            lines.append(f"\nStage {code(rep.get('stage'))}: word {n(rep.get('n_grams'))}-grams, an item is found when "
                         f"{n(rep.get('min_ngrams', 1))} or more of its n-grams occur in a document; items of fewer "
                         f"than {n(rep.get('n_grams'))} words are too short to test (counted, never matched)."
                         + (f" By meaning: a document whose embedding is within cosine {n(meaning.get('threshold'))} "
                            "of an item's is counted too, apart from the n-grams." if meaning else "") + "\n")
            lines.append(table(["benchmark", "items checked", "too short", "items found", "documents touched",
                                *(["items found by meaning", "documents touched by meaning"] if meaning else []),
                                "action"], bench))
        return "\n".join(lines) + "\n"

    def embeddings(self) -> str:
        """The embed stage's model and cost, and the clusters found on its vectors (none: no section)."""
        emb, clus = self.stats.get("embeddings") or [], self.stats.get("clusters") or []
        if not emb and not clus:
            return ""
        lines = ["## Embeddings and clusters\n"]
        for e in emb:
            lines.append(f"Stage {code(e.get('stage'))} embedded {n(e.get('documents'))} documents with "
                         f"{code(e.get('model'))} ({n(e.get('dim'))} dimensions, the first {n(e.get('max_tokens'))} "
                         f"word pieces of each) on {', '.join(code(d) for d in e.get('devices') or []) or '–'}: "
                         f"{n(e.get('cpu_ms_per_doc'))} ms of CPU per document, {n(e.get('wall_s'))} s in the encoder "
                         f"in all, plus {n(e.get('load_wall_s'))} s loading the model.\n")
        for c in clus:
            lines.append(f"Stage {code(c.get('stage'))} put each document in one of {n(c.get('clusters'))} k-means "
                         f"clusters (`{text(c.get('key'), 60)}` in its metadata; fitted on {n(c.get('fit_documents'))} "
                         "documents). Terms are the words that most set a cluster apart (share of its documents x "
                         "log of how much more often they occur there than in the whole output); samples are the "
                         "first titles or URLs seen.\n")
            rows = [[n(r.get("cluster")), n(r.get("documents")), pct(r.get("documents"), c.get("documents")),
                     ", ".join(map(str, r.get("terms") or [])) or "–", " · ".join(map(str, r.get("samples") or [])) or "–"]
                    for r in c.get("by_cluster") or []]
            lines.append(table(["cluster", "documents", "share", "terms", "samples"], rows))
        return "\n".join(lines) + "\n"

    def scores(self) -> str:
        keys = sorted(k for k, v in self.prof.scores.items() if v)
        linked, found = thresholds_by_score(self.run.stages, keys)
        lines = ["## Classifier and language scores\n"]
        if not keys:
            lines.append("The output documents carry no `*_score` metadata (no classifier or language-ID stage ran).")
        else:
            lines.append(self.img("scores", "Score histograms with thresholds"))
            rows = []
            for k in keys:
                s = summarize(self.prof.scores[k])
                thr = ", ".join(f"{p}={v:g}" for p, v in linked.get(k, [])) or "–"
                rows.append([code(k), n(s["n"]), f"{s['min']:.3f}", f"{s['p10']:.3f}", f"{s['median']:.3f}", f"{s['p90']:.3f}", f"{s['max']:.3f}", f"{s['mean']:.3f}", thr])
            lines.append(table(["score", "documents", "min", "p10", "median", "p90", "max", "mean", "threshold(s)"], rows))
            lines.append("\nDistributions are over the **kept** documents: documents below a threshold were removed, so the histograms are cut at it.")
        unlinked = [f for f in found if not f["score_key"]]
        if unlinked:
            lines.append("\nOther thresholds in the recipe: " + ", ".join(f"{code(f['stage'] + '.' + f['param'])}={f['value']:g}" for f in unlinked) + ".")
        return "\n".join(lines) + "\n"

    def mix(self) -> str:
        m = self.run.manifest
        lines = ["## Mix composition\n"]
        if not m:
            return "\n".join(lines + ["No mixer manifest was given (`cuvee card RUN_DIR --mix MANIFEST`), so this card describes the filtered documents only.\n"])
        lines.append(self.img("mix", "Mix composition: target vs realised tokens"))
        rows = []
        for s in m.get("sources") or []:
            t, r = s.get("target_tokens"), s.get("realised_tokens")
            rows.append([code(s.get('name')), f"{float(s.get('weight', 0)):.3f}", n(t), n(r), pct(r, t) if t else "–", n(s.get("documents")), n(s.get("documents_used")), n(s.get("available_tokens")), f"{float(s['epochs']):.2f}" if s.get("epochs") is not None else "–"])
        lines.append(table(["source", "weight", "target tokens", "realised tokens", "realised / target", "documents available", "documents drawn", "available tokens", "epochs"], rows))
        shards = m.get("shards") or []
        lines.append(
            f"\nMix {code(m.get('name', '?'))} (seed {text(m.get('seed', '?'))}): target {n(m.get('target_tokens'))} tokens, "
            f"realised {n(m.get('total_tokens'))} tokens in {len(shards)} Megatron indexed shard(s) ({code(m.get('dtype', '?'))})"
            + (f", config SHA-256 {code(m['config_sha256'])}" if m.get("config_sha256") else "")
            + ". Token counts in this section are exact (counted by the mixer's tokenizer)."
        )
        lines += _selections(m.get("selections"))
        lines += chosen_by_lines(m)
        if shards:
            lines.append("\n" + table(["shard", "documents", "tokens"], [[code(s.get('prefix')), n(s.get("documents")), n(s.get("tokens"))] for s in shards[:50]]))
        return "\n".join(lines) + "\n"

    def tokenizer(self) -> str:
        lines = ["## Tokenizer\n"]
        tok = (self.run.manifest or {}).get("tokenizer")
        if tok:
            lines.append(table(["field", "value"], [[k, v] for k, v in tok.items()]))
            lines.append(f"\nThe mix was tokenized with {code(tok.get('name', '?'))} ({text(tok.get('kind', '?'))}); each document ends with the EOS token.")
        else:
            lines.append("This card has no mixer manifest, so the data is untokenized text.")
        if self.prof.tokens_est:
            how = "all" if self.prof.tokens_exact else f"the first {n(self.prof.tokenized_docs)}"
            lines.append(
                f"\nToken estimates elsewhere in this card use tiktoken `{self.prof.tokenizer}` on {how} output documents"
                + ("" if self.prof.tokens_exact else ", extrapolated by characters")
                + f" ({n(self.prof.tokens_est)} tokens, {self.prof.chars / self.prof.tokens_est:.2f} characters per token)."
            )
        return "\n".join(lines) + "\n"

    def limitations(self) -> str:
        names = " ".join(s.name.lower() for s in self.run.stages)
        langs = self.languages
        total = sum(langs.values()) or 1
        top_lang, top_n = max(langs.items(), key=lambda kv: kv[1]) if langs else ("?", 0)
        b = [
            "Common Crawl over-represents some languages, regions and kinds of sites (those that are linked to and allow crawling); this data inherits that skew"
            + (f": {code(top_lang)} alone is {pct(top_n, total)} of documents." if langs else "."),
        ]
        b.append(
            "Language identification is unreliable on short, mixed-language or boilerplate-heavy pages; some documents carry the wrong `language` label."
            if langs else "No language identification ran: documents of every language are mixed, unlabelled."
        )
        if any(w in names for w in ("gopher", "c4", "fineweb", "llama")) and len(langs) > 1:
            b.append("The heuristic quality filters (Gopher / C4 / FineWeb style) were designed and tuned on English; they may remove more good text in other languages.")
        if self.prof.scores and any(k for k in self.prof.scores if k != "language_score"):
            b.append("Model-based quality scores favour the style of their training data (e.g. encyclopedic or educational prose) and may under-represent informal, regional or minority-dialect writing.")
        if not any(is_dedup_stage(s) for s in self.run.stages):
            b.append("No deduplication ran: duplicates and near-duplicates remain.")
        if not any(w in names for w in ("pii", "email", "anonym")):
            b.append("No PII removal stage ran: e-mail addresses, phone numbers and names present on the crawled pages remain in the text.")
        if "url" in names:
            b.append("URL block lists are incomplete: some adult, spam or malicious pages pass, and some benign pages on listed domains were removed.")
        else:
            b.append("No URL block list ran: adult, spam and malicious sites were not filtered by domain.")
        if self.prof.domains:
            top10 = sum(v for _, v in self.prof.domains.most_common(10))
            b.append(f"Domain concentration: the 10 most frequent hosts hold {pct(top10, self.prof.documents)} of documents.")
        if self.prof.documents < 1000:
            b.append(f"The dataset is tiny ({n(self.prof.documents)} documents): the distributions above are noisy.")
        if not self.run.complete:
            b.append("This is a partial run: stages that did not report are not reflected in the numbers.")
        if self.prof.unreadable:
            b.append(f"{len(self.prof.unreadable)} output file(s) could not be read and are missing from the score and token figures: " + "; ".join(text(u) for u in self.prof.unreadable[:5]))
        b += [f"Loader note: {text(x, 600)}" for x in self.run.notes]
        b.append("Text is taken as published on the web: it contains factual errors, opinions, offensive content and copyrighted material; users are responsible for their use of it.")
        return "## Known limitations and biases\n\n" + "\n".join(f"- {x}" for x in b) + "\n"

    def citation(self) -> str:
        key = re.sub(r"[^a-z0-9]+", "_", self.run.name.lower()).strip("_")[:60] or "dataset"
        year = re.sub(r"[^0-9]", "", str(self.stats.get("finished") or self.stats.get("started") or _dt.date.today().isoformat())[:4])

        def one_line(v: Any) -> str:  # inside the code block only a line starting with ``` could end it
            return " ".join(str(v).split())[:300]

        return (
            "## Citation\n\n```bibtex\n"
            f"@misc{{{key}_{year},\n  title = {{{one_line(self.run.name)}: a Common Crawl pretraining dataset built with cuvee}},\n"
            f"  year = {{{year}}},\n  note = {{cuvee {one_line(self.stats.get('cuvee_version', ''))}, recipe sha256 {one_line(self.stats.get('recipe_sha256', 'unknown'))}}}\n}}\n```\n\n"
            "The processing follows the design of FineWeb; please also cite it and Common Crawl:\n\n```bibtex\n"
            "@inproceedings{penedo2024fineweb,\n  title = {The FineWeb Datasets: Decanting the Web for the Finest Text Data at Scale},\n"
            "  author = {Guilherme Penedo and Hynek Kydl{\\'\\i}{\\v{c}}ek and Loubna Ben allal and Anton Lozhkov and Margaret Mitchell and Colin Raffel and Leandro Von Werra and Thomas Wolf},\n"
            "  booktitle = {The Thirty-eighth Conference on Neural Information Processing Systems Datasets and Benchmarks Track},\n  year = {2024}\n}\n"
            "@misc{commoncrawl,\n  title = {Common Crawl},\n  howpublished = {\\url{https://commoncrawl.org}}\n}\n```\n"
        )

    def render(self) -> str:
        parts = [
            self.title(), self.partial_banner(), self.summary(), self.sources(), self.processing(), self.funnel(),
            self.language(), self.dedup(), self.embeddings(), self.contamination(), self.scores(), self.mix(), *self.after_mix,
            self.tokenizer(), self.limitations(), self.citation(),
        ]
        return "\n".join(p for p in parts if p)
