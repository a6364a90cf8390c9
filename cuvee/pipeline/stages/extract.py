"""``extract``: main-text extraction with trafilatura, FineWeb settings, a per-document time limit and a size cap.

``extractor: resiliparse`` swaps trafilatura for resiliparse's ``extract_plain_text(html, main_content=True)``,
DCLM's extractor (Li et al. 2024): 5-6x less CPU, higher recall, lower precision. From raw WARC bytes
(``benchmarks/bench_extraction.py --wcxb --resiliparse``): ScrapingHub F1 0.898 (P 0.830, R 0.979) against
trafilatura's 0.964 (P 0.958, R 0.971); WCXB test F1 0.793 (P 0.791, R 0.867) against 0.796 (P 0.903,
R 0.775). The trafilatura-only settings below are refused when it is chosen. ``extractor: routed`` runs both
(:class:`RoutedExtract`): WCXB test F1 0.854 at trafilatura's CPU (``benchmarks/bench_extraction_routed.py``).
The guards are the same, but resiliparse runs in C, where no Python timer can interrupt it (20,000 nested ``<div>`` ran
15-45 s), so it extracts in a child process that the kernel ends at ``timeout_s``
(:mod:`~cuvee.pipeline.stages.resiliparse_worker`); the page is then a ``dropped_extraction_timeout``.

Settings follow datatrove's ``Trafilatura`` extractor as used for FineWeb (``favor_precision=True``,
``include_comments=False``) with one deliberate difference: ``deduplicate`` defaults to **False**.
trafilatura's ``deduplicate`` drops paragraphs it has already seen through a *process-wide* LRU cache, so a
document's extracted text depends on which documents the same process extracted before it: output changes
with the task count, the sharding and the input order, and reruns are not reproducible. cuvee removes
duplicated content with its own line / exact / MinHash dedup stages, which are deterministic. Set
``deduplicate: true`` to reproduce FineWeb exactly (``recipes/fineweb.yaml`` does). Measured on the
ScrapingHub benchmark from raw WARC bytes: F1 0.9554 (default) vs 0.9498 (``deduplicate: true``).

A second difference from a bare trafilatura 2.x call: tables are written as lines, not as pipe rows
(``tables: text``, see :mod:`cuvee.pipeline.stages.trafilatura_patches`), as trafilatura 1.x did for FineWeb.
Speed-ups leave trafilatura's output unchanged or at its F1: the fallback comparison is skipped for long
main texts, and its boilerplate XPaths are guarded or compiled. Every change to trafilatura's internals goes
through :mod:`~cuvee.pipeline.stages.trafilatura_patches`, which applies them only on the trafilatura release
they were verified on, after a probe on bundled pages; otherwise extraction is plain trafilatura, said once.

Four guards, each a counted drop:

``dropped_too_large``           HTML longer than ``max_input_chars`` (never parsed: pathological pages
                                dominate extraction time)
``dropped_extraction_timeout``  extraction ran past ``timeout_s``
``dropped_empty_extraction``    trafilatura found no main text
``dropped_extraction_error``    trafilatura raised (logged, first few with the URL)

Why an in-process timer for trafilatura (Python, which a signal handler interrupts): datatrove runs the extractor in a sandbox process and ships every page through a
pipe (pickling the HTML twice); when the sandbox cannot start (e.g. ``lxml_html_clean`` missing) every
document is silently counted as a timeout. Here an interval timer (``setitimer``) interrupts the
extraction in the same process; this needs the main thread, which is where datatrove's local, Slurm and
Ray executors run a task. Outside the main thread the step falls back to datatrove's sandbox process.
The default timer counts *CPU* time of the process (``ITIMER_PROF``/``SIGPROF``), so a busy shared node
does not turn slow-but-normal pages into timeouts; ``timer="wall"`` uses ``ITIMER_REAL``/``SIGALRM``.

Input: ``doc.text`` holding HTML (from ``response_check``); a document still carrying the reader's raw
payload is decoded first (same rules as ``response_check``). WET ``conversion`` records are already text
and pass through untouched.
"""

from __future__ import annotations

import signal
import threading
from typing import Literal

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger
from pydantic import Field, model_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage
from cuvee.pipeline.stages.resiliparse_worker import PageTimeout, ResiliparseWorker
from cuvee.pipeline.stages.trafilatura_patches import Patches, off_reason, patched


class ExtractionTimeout(BaseException):
    """Raised by the timer's signal handler inside the extraction call.

    A BaseException on purpose: trafilatura wraps parsing in broad ``except Exception`` blocks that would
    swallow an ordinary exception and carry on extracting. ``_alarm_fired`` also records the alarm, so a
    timeout that is swallowed anyway is still counted as one.
    """


_alarm_fired = False


def _on_alarm(signum, frame):
    global _alarm_fired
    _alarm_fired = True
    raise ExtractionTimeout()


TRAFILATURA_ONLY = ("favor_precision", "include_comments", "deduplicate", "include_tables", "fast", "skip_fallback_above",
                    "tables", "guard_xpaths", "native_xpaths")


class ExtractParams(StageParams):
    extractor: Literal["trafilatura", "resiliparse", "routed"] = Field(
        "trafilatura", description="trafilatura (FineWeb) or resiliparse's main-content plain text (DCLM): faster, lower F1; "
                                   "routed: both, resiliparse's text where trafilatura's is much shorter (see RoutedExtract)")
    route_ratio: float = Field(
        0.65, gt=0, le=1, description="routed: resiliparse's text when trafilatura's is under this share of its length (other extractors: unused)")
    timeout_s: float = Field(1.0, gt=0, description="per-document extraction time limit (FineWeb: 1 s)")
    max_input_chars: int = Field(2_000_000, gt=0, description="HTML longer than this is dropped unparsed")
    favor_precision: bool = True
    include_comments: bool = False
    deduplicate: bool = Field(False, description="trafilatura's process-wide duplicate-paragraph cache: output then depends on "
                              "what the task saw before (task count, order); FineWeb: true. cuvee's dedup stages do this job")
    include_tables: bool = True
    fast: bool = Field(False, description="trafilatura no_fallback: skip the readability/justext fallbacks (faster, slightly lower recall)")
    timer: Literal["cpu", "wall"] = Field("cpu", description="measure timeout_s in process CPU time (robust on busy nodes) or wall time")
    skip_fallback_above: int | None = Field(
        2000, ge=0, description="skip trafilatura's readability/jusText comparison when its main text has at least "
                                "this many characters (~1.4x faster, same F1 on both benchmarks); null = always compare")
    tables: Literal["text", "markdown"] = Field(
        "text", description="table cells as their own lines, as trafilatura 1.x and FineWeb had them (text), or "
                            "trafilatura 2.x's pipe rows (markdown), which FineWeb's line rules mostly drop")
    guard_xpaths: bool = Field(
        True, description="evaluate trafilatura's boilerplate XPaths with their regex tests guarded by an attribute "
                          "check: the same nodes and output, ~10 % less extraction time; false = trafilatura's own")
    native_xpaths: bool = Field(
        True, description="evaluate the boilerplate XPaths that fit a small XPath subset as compiled Python over "
                          "lxml's C tag filter, with cached regex verdicts: the same nodes and output, 1.3-1.5x faster "
                          "extraction on the benchmark pages; false = libxml2's XPath engine")

    @model_validator(mode="after")
    def _trafilatura_settings_need_trafilatura(self):
        set_here = [k for k in TRAFILATURA_ONLY if k in self.model_fields_set]
        if self.extractor == "resiliparse" and set_here:
            raise ValueError(f"{', '.join(set_here)}: trafilatura settings, but extractor is {self.extractor}; "
                             "remove them or use extractor: trafilatura")
        return self


class TrafilaturaExtract(PipelineStep):
    """HTML in ``doc.text`` -> main text in ``doc.text`` (trafilatura, FineWeb settings)."""

    name = "⛏ trafilatura extract"
    type = "🛢 - EXTRAC"
    engine = "trafilatura"

    def __init__(self, params: ExtractParams | None = None, **overrides):
        """``TrafilaturaExtract(params)`` or ``TrafilaturaExtract(timeout_s=..., ...)``: the settings and their
        defaults are :class:`ExtractParams`' fields, validated there."""
        super().__init__()
        if params is not None and overrides:
            raise TypeError("TrafilaturaExtract takes ExtractParams or keywords, not both")
        p = params if params is not None else ExtractParams(**overrides)
        self.timer = p.timer
        self.timeout_s = p.timeout_s
        self.max_input_chars = p.max_input_chars
        self.kwargs = {"favor_precision": p.favor_precision, "include_comments": p.include_comments,
                       "deduplicate": p.deduplicate, "include_tables": p.include_tables, "fast": p.fast}
        self.skip_fallback_above = None if p.fast else p.skip_fallback_above
        self.patches = Patches(skip_fallback_above=self.skip_fallback_above, tables_as_text=p.tables == "text",
                               guard_xpaths=p.guard_xpaths, native_xpaths=p.native_xpaths)
        self._errors_logged = 0
        if self.patches.any():
            off_reason()  # verified (and any refusal said) once per process, here when the recipe is built

    def _extract(self, html: str, url: str | None) -> str | None:
        from trafilatura import extract

        return extract(html, url=url, **self.kwargs)

    def _extract_html(self, html: str) -> str | None:
        return self._extract(html, None)

    def _prepare(self, doc: Document) -> str | None:
        """The HTML to extract, or None for documents that pass through (WET text)."""
        if doc.metadata.get("warc_type") == "conversion":
            return None
        from cuvee.pipeline.stages.response import decode_html, pop_raw_payload

        payload = pop_raw_payload(doc)
        if payload is not None and not doc.text:
            doc.text, _enc, _src = decode_html(payload, doc.metadata.get("content_type") or "")
        return doc.text

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with patched(self.patches):
            yield from self._run_timed(data)

    def _run_timed(self, data: DocumentsPipeline) -> DocumentsPipeline:
        in_main = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        if in_main:
            self._itimer, sig = (signal.ITIMER_PROF, signal.SIGPROF) if self.timer == "cpu" else (signal.ITIMER_REAL, signal.SIGALRM)
            previous = signal.signal(sig, _on_alarm)
            try:
                yield from self._run(data, self._timed_call)
            finally:
                signal.setitimer(self._itimer, 0)
                signal.signal(sig, previous)
        else:
            logger.info("extract: not in the main thread, using datatrove's sandbox process for the time limit")
            from datatrove.pipeline.extractors.base import ExtractorSandbox

            with ExtractorSandbox(timeout=self.timeout_s, warmup_text="") as sandbox:
                def call(html: str, url: str | None):
                    try:  # the sandbox binds its function once per worker process, so no per-document url here
                        return sandbox.process_document(html, self._extract_html)
                    except TimeoutError:
                        raise ExtractionTimeout() from None

                yield from self._run(data, call)

    def _timed_call(self, html: str, url: str | None) -> str | None:
        global _alarm_fired
        _alarm_fired = False
        try:
            signal.setitimer(self._itimer, self.timeout_s)
            try:
                out = self._extract(html, url)
            finally:
                signal.setitimer(self._itimer, 0)
        except RecursionError as e:  # deeply nested DOMs
            raise RuntimeError(f"recursion: {e}") from None
        if _alarm_fired:
            raise ExtractionTimeout()
        return out

    def _run(self, data: DocumentsPipeline, call) -> DocumentsPipeline:
        for doc in data:
            self.stat_update("total")
            with self.track_time():
                html = self._prepare(doc)
                reason = None
                if html is None:
                    reason = None if doc.text.strip() else "empty_extraction"
                elif len(html) > self.max_input_chars:
                    reason = "too_large"
                else:
                    url = doc.metadata.get("url")
                    try:
                        text = call(html, url)
                    except ExtractionTimeout:
                        reason = "extraction_timeout"
                    except Exception as e:  # noqa: BLE001 - counted and logged as extraction_error
                        reason = "extraction_error"
                        if self._errors_logged < 10:
                            self._errors_logged += 1
                            logger.warning(f"extract: {self.engine} failed on {url or doc.id}: {type(e).__name__}: {e}")
                    else:
                        if text and text.strip():
                            doc.text = text
                        else:
                            reason = "empty_extraction"
            if reason:
                self.stat_update("dropped", f"dropped_{reason}")
                continue
            self.stat_update("forwarded")
            self.update_doc_stats(doc)
            yield doc


class ResiliparseExtract(TrafilaturaExtract):
    """HTML in ``doc.text`` -> main text in ``doc.text`` (resiliparse ``main_content=True``, as DCLM); the same
    guards and counters as trafilatura's step, the time limit enforced on a worker process (any thread)."""

    name = "⛏ resiliparse extract"
    engine = "resiliparse"

    def __init__(self, params: ExtractParams | None = None, **overrides):
        PipelineStep.__init__(self)
        if params is not None and overrides:
            raise TypeError("ResiliparseExtract takes ExtractParams or keywords, not both")
        p = params if params is not None else ExtractParams(extractor="resiliparse", **overrides)
        self.timer = p.timer
        self.timeout_s = p.timeout_s
        self.max_input_chars = p.max_input_chars
        self._errors_logged = 0

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        worker = ResiliparseWorker(self.timeout_s, self.timer)

        def call(html: str, url: str | None) -> str | None:
            try:
                return worker.extract(html)
            except PageTimeout:
                raise ExtractionTimeout() from None

        try:
            yield from self._run(data, call)
        finally:
            worker.close()


class RoutedExtract(TrafilaturaExtract):
    """Both extractors on every page; resiliparse's text where trafilatura's is under ``route_ratio`` of its length.

    Why: trafilatura (precision mode) is precise but misses much of the main text of forums, services, listings
    and products; resiliparse keeps nearly all of it with more boilerplate. A much shorter trafilatura text is
    the sign of such a miss. trafilatura runs with ``fast`` (no readability/jusText fallback) unless ``fast`` is
    set: the fallbacks exist for recall, which resiliparse now supplies, and without them the pair costs about
    what trafilatura with fallbacks costs alone. ``route_ratio`` 0.65 was chosen on the first 500 WCXB dev pages
    (a grid of 0.2-0.8), then measured on ScrapingHub, WCXB test and the other 997 dev pages
    (``benchmarks/bench_extraction_routed.py``). A resiliparse failure or timeout keeps trafilatura's text."""

    name = "⛏ routed extract"
    engine = "trafilatura+resiliparse"

    def __init__(self, params: ExtractParams):
        fast = params.fast if "fast" in params.model_fields_set else True
        super().__init__(params.model_copy(update={"fast": fast}))
        self.route_ratio = params.route_ratio

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        self._worker = ResiliparseWorker(self.timeout_s, self.timer)
        try:
            yield from super().run(data, rank, world_size)
        finally:
            self._worker.close()

    def _run(self, data: DocumentsPipeline, call) -> DocumentsPipeline:
        def routed(html: str, url: str | None) -> str | None:
            return self.route(call(html, url) or "", html)

        yield from super()._run(data, routed)

    def route(self, traf: str, html: str) -> str:
        try:
            resi = self._worker.extract(html) or ""
        except Exception:  # noqa: BLE001 - PageTimeout or a worker error: trafilatura's text stands
            self.stat_update("resiliparse_failed")
            return traf
        if len(traf.strip()) < self.route_ratio * len(resi.strip()):
            self.stat_update("routed_to_resiliparse")
            return resi
        return traf


def make_extractor(p: ExtractParams) -> TrafilaturaExtract:
    if p.extractor == "routed":
        return RoutedExtract(p)
    return ResiliparseExtract(p) if p.extractor == "resiliparse" else TrafilaturaExtract(p)


@register_stage("extract", ExtractParams)
def build_extract(p: ExtractParams, ctx: BuildContext):
    """Main-text extraction (trafilatura with FineWeb settings, or resiliparse as DCLM) with a per-document time
    limit and size cap."""
    return [make_extractor(p)]
