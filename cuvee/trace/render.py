"""A trace as the lines ``cuvee trace`` prints (``--json`` prints the mapping itself)."""

from __future__ import annotations


def _n(v) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _short(v, limit: int = 160) -> str:
    s = " ".join(str(v).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _scores(scores: dict) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={_short(v, 60)}" for k, v in scores.items())


def _archive(origin: dict) -> list[str]:
    if origin.get("source_file") is not None:
        off, length, skip = origin.get("source_offset"), origin.get("source_length"), origin.get("source_skip")
        span = (f"bytes {_n(off)}-{_n(off + length - 1)} ({_n(length)} bytes)" if length is not None
                else f"from byte {_n(off)} to its gzip member's end")
        lines = [f"archive    {origin['source_file']}  {span}" + (f", then {_n(skip)} bytes decompressed skipped"
                                                                 if skip else "")]
        rid, digest = origin.get("warc_record_id"), origin.get("payload_digest")
        if rid or digest:
            lines.append(f"record     {rid or '-'}  payload {digest or '-'}")
        return lines
    if origin.get("input_file") is not None:
        return [f"run input  {origin['input_file']} row {_n(origin.get('input_row'))}"]
    return []


def _clusters(cl: list[dict]) -> str:
    parts = []
    for c in cl:
        if c["kind"] == "line":
            parts.append(f"line: {_n(c.get('lines_removed') or 0)} line(s) removed, most shared by "
                         f"{_n(c.get('size'))} document(s)")
        elif c.get("keeper"):
            parts.append(f"{c['kind']}: keeper of a cluster of {_n(c.get('size'))}")
        else:
            parts.append(f"{c['kind']}: a copy of {c.get('cluster_id')} (cluster of {_n(c.get('size'))})")
    return "; ".join(parts)


def _head(t: dict) -> list[str]:
    if "position" in t:
        p, d = t["position"], t["document"]
        where = "the EOS the mixer appended" if p["eos"] else f"token {_n(p['offset'])} of {_n(p['document_tokens'])}"
        lines = []
        if "training" in t:
            tr = t["training"]
            lines.append(f"step {_n(tr['step'])}, row {_n(tr['row'])}, token {_n(tr['at'])} of run {tr['folder']} "
                         f"(rank {tr['rank']}, micro-batch {tr['micro_batch']}, loader epoch {tr['loader_epoch']}, "
                         f"order {tr['order']}):")
        lines.append(f"token {_n(p['token'])} of mix {t['mix']['name']!r} ({t['mix']['folder']}): shard {p['shard']}, "
                     f"document {_n(p['document'])}, {where} (id {p['token_id']})")
        source = d["source"] + (f" (selection {d['selection']})" if d.get("selection") else "")
        lines.append(f"document   {d['id']}  source {source}, epoch {d['epoch']}, table entry {_n(d['entry'])}")
        return lines
    d = t["document"]
    if d.get("kept"):
        return [f"document {d['id']} of run {t['run']}: kept (in its output)"]
    return [f"document {d['id']} of run {t['run']}: dropped by {d['dropped_by']} (reason: {d.get('reason')})",
            f"excluded   {d['exclusion_record']}"]


def render(t: dict) -> str:
    """One trace as text."""
    lines = _head(t)
    inp = t.get("input") or {}
    if inp.get("file"):
        by = f", written by run {inp['run']} (recipe {inp['recipe']})" if inp.get("run") else \
            " (no cuvee run folder holds it: the row is the page as given)"
        lines.append(f"input      {inp['file']} row {_n(inp['row'])}{by}")
    page = t.get("page") or {}
    if page:
        rest = ", ".join(_short(page[k], 40) for k in ("date", "cc_snapshot", "language") if k in page)
        lines.append(f"page       {_short(page.get('url', '-'))}" + (f"  ({rest})" if rest else ""))
    lines += _archive(t.get("origin") or {})
    stages = t.get("stages")
    if stages:
        kept = all(s["decision"] == "kept" for s in stages)
        lines.append("stages     " + ("every stage kept it:" if kept else "up to the stage that dropped it:"))
        width = max(len(s["stage"]) for s in stages)
        for s in stages:
            dec = s["decision"] + (f" ({s['reason']})" if s.get("reason") else "")
            lines.append(f"  {s['stage']:<{width}}  {dec:<8}  {_scores(s['scores'])}".rstrip())
    if t.get("clusters"):
        lines.append(f"dedup      {_clusters(t['clusters'])}")
    if "verify" in t:
        v = t["verify"]
        lines.append(f"verify     {'OK' if v['ok'] else 'MISMATCH'}")
        lines += [f"  {c['check']:<7}{'ok' if c['ok'] else 'FAILED'}: {c['detail']}" for c in v["checks"]]
    return "\n".join(lines)
