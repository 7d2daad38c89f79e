"""Offline near-duplicate detection over crawl dumps: the engine of ``scrapy-neardup dedup``.

Documents stream from the readers; extraction and fingerprinting (the costly, independent part) run in the
extraction runtime's worker processes (:mod:`scrapy_neardup.workers`, the crawl's), in input order; the
decision runs in this process against the store, exactly as in a crawl. Memory holds the index (in the
store) and a bounded window of documents in flight, not the input.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from typing import NamedTuple, Union

from ..assembly import build_algorithm, build_pipeline, build_store, build_template_guard, new_detector, open_detector
from ..engine.algorithms.base import Fingerprint
from ..engine.canonical import Declaration, chosen, declared_canonical, may_fetch
from ..engine.decisions import Decision, DecisionLoop, Declared
from ..engine.detector import Verdict
from ..engine.extract import decode_html, quiet_trafilatura
from ..engine.prepare import DocumentPipeline, Prepared, body_digest
from ..settings import Config, resolved_workers
from ..store import BODY_DIGEST_BYTES, Store
from ..workers import ExtractionPool, in_order, init_worker, worker_pipeline
from .inputs import BadLine, Document, DocumentReader, RawLine, parse_line

#: Documents decided per store round trip.
BATCH = 256
#: A worker process is sent documents in batches of up to this many, or this many bytes of input, so
#: that inter-process traffic is a few large messages rather than one per document.
WORKER_BATCH_DOCS = 128
WORKER_BATCH_BYTES = 1 << 20

_worker_pipeline: DocumentPipeline | None = None


class Unreadable(NamedTuple):
    """What a worker sends back for an input line that could not be read: why."""

    message: str


class Ready(NamedTuple):
    """What a worker sends back for a document: its URL, :meth:`Prepared.to_wire`, what its ``Link``
    header or ``canonical`` field declares, and the digest of its bytes (:func:`document_digest`)."""

    url: str
    wire: tuple
    declared: Declaration | None
    body: bytes | None = None


class Unchanged(NamedTuple):
    """A document filed in an earlier run with the same bytes (:func:`document_digest`): its verdict is the one
    it has, read from the store, without extraction. Passed through the workers' queue as it is, to keep its
    place in the input's order, with the similarity its record holds."""

    url: str
    similarity: float


#: What a worker sends back: :class:`Ready`, :class:`Unreadable`, or an :class:`Unchanged` it was given.
_Result = Union[Ready, Unreadable, Unchanged]


def document_digest(doc: Document) -> bytes:
    """The digest a document's record is filed with (:attr:`Prepared.body`, :data:`BODY_DIGEST_BYTES` of it):
    of its HTML's bytes and ``Content-Type`` as a crawl takes a response's, or of its text."""
    if doc.html is not None:
        html = doc.html if isinstance(doc.html, bytes) else doc.html.encode("utf-8", "surrogatepass")
        return body_digest(html, doc.content_type)[:BODY_DIGEST_BYTES]
    return body_digest((doc.text or "").encode("utf-8", "surrogatepass"), "text/plain")[:BODY_DIGEST_BYTES]


def _document(item: Document | RawLine) -> Document | Unreadable:
    """The document of an input item: a JSON line parsed, or why it cannot be read."""
    if not isinstance(item, RawLine):
        return item
    try:
        return parse_line(item)
    except BadLine as exc:
        return Unreadable(str(exc))


def _prepare_in_worker(item: Document | RawLine | Unchanged) -> _Result:
    """A document (a JSON line parsed first) to what the decision needs, in the process that runs it."""
    if isinstance(item, Unchanged):
        return item
    doc = _document(item)
    if isinstance(doc, Unreadable):
        return doc
    return Ready(doc.url, prepare(worker_pipeline(), doc).to_wire(), doc.declared, document_digest(doc))


def prepare_batch(items: list[Document | RawLine | Unchanged]) -> list[_Result]:
    """Worker task: a batch of documents (:data:`WORKER_BATCH_DOCS`)."""
    return [_prepare_in_worker(item) for item in items]


def _lost(item: Document | RawLine | Unchanged, why: BaseException) -> _Result:
    """What a document whose extraction ended its worker (a native crash, the timeout) becomes: a document
    with no fingerprint (skip reason ``error``), reported, never silently dropped."""
    if isinstance(item, Unchanged):
        return item
    doc = _document(item)
    if isinstance(doc, Unreadable):
        return doc
    print(f"scrapy-neardup: {doc.url}: extraction failed and the document is skipped ({why})", file=sys.stderr)
    return Ready(doc.url, Prepared(None, "error").to_wire(), doc.declared)


def _worker_batches(
    documents: Iterable[Document | RawLine | Unchanged],
) -> Iterator[list[Document | RawLine | Unchanged]]:
    batch: list[Document | RawLine | Unchanged] = []
    size = 0
    for item in documents:
        batch.append(item)
        if isinstance(item, RawLine):
            size += item.size
        elif isinstance(item, Document):
            size += len(item.html or item.text or "")
        if len(batch) >= WORKER_BATCH_DOCS or size >= WORKER_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _chunks(items: Iterable[Document | RawLine], size: int) -> Iterator[list[Document | RawLine]]:
    chunk: list[Document | RawLine] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def prepare(pipeline: DocumentPipeline, doc: Document) -> Prepared:
    try:
        if doc.html is not None:
            html = decode_html(doc.html, doc.content_type) if isinstance(doc.html, bytes) else doc.html
            return pipeline.from_html(html, doc.url)
        return pipeline.from_text(doc.text or "")
    except Exception:  # noqa: BLE001 - one pathological document never ends a run
        return Prepared(None, "error")


#: Input bytes of declared pages kept from the first pass for the copies that come before them.
MAX_AHEAD_BYTES = 256 << 20


class DeclaredAhead:
    """Declared pages that come *after* a copy declaring them in the input, read in a first pass, so that each
    is decided before its copy, as a crawl fetches a declared page first (:mod:`~scrapy_neardup.engine.canonical`,
    rule 3): the same pages in the same order get the same groups from a crawl and from ``dedup``. Only the
    declarations a crawl would fetch count (``NEARDUP_CANONICAL_FETCH``); the kept documents are bounded by
    :data:`MAX_AHEAD_BYTES` (beyond it, copies are decided without their declared page, as a crawl whose
    fetch failed)."""

    def __init__(self, config: Config, documents: dict[str, Document]) -> None:
        self.config = config
        self.documents = documents
        self._prepared: dict[str, Prepared] = {}
        self._pipeline: DocumentPipeline | None = None

    @classmethod
    def scan(cls, config: Config, reader: DocumentReader) -> DeclaredAhead | None:
        if not config.canonical or config.canonical_fetch == "none":
            return None
        first: dict[str, int] = {}
        declaring: list[tuple[int, str]] = []
        for i, doc in enumerate(_documents(reader)):
            first.setdefault(doc.url, i)
            html = decode_html(doc.html, doc.content_type) if isinstance(doc.html, bytes) else doc.html
            declaration = chosen(doc.declared, declared_canonical(html, doc.url) if html else None)
            if (
                declaration
                and declaration.url != doc.url
                and may_fetch(config.canonical_fetch, doc.url, declaration.url)
            ):
                declaring.append((i, declaration.url))
        wanted = {url for i, url in declaring if first.get(url, -1) > i}
        if not wanted:
            return None
        kept: dict[str, Document] = {}
        size = 0
        for doc in _documents(reader):
            if doc.url in wanted and doc.url not in kept:
                size += len(doc.html or doc.text or "")
                if size > MAX_AHEAD_BYTES:
                    break
                kept[doc.url] = doc
        return cls(config, kept)

    def take(self, url: str) -> Declared | None:
        """The declared page at ``url``, prepared here (once): for every copy that declares it until one
        matches it and brings it in, as a crawl fetches it for each such copy."""
        prepared = self._prepared.get(url)
        if prepared is None:
            doc = self.documents.pop(url, None)
            if doc is None:
                return None
            if self._pipeline is None:
                quiet_trafilatura()
                self._pipeline = build_pipeline(self.config)  # this process's own: the workers' is theirs
            prepared = self._prepared[url] = prepare(self._pipeline, doc)
        return Declared(url, prepared)


def _documents(reader: DocumentReader) -> Iterator[Document]:
    """The documents of a reader, JSON lines parsed here (lines that cannot be read are passed over: the
    main pass counts them)."""
    for item in DocumentReader(
        reader.paths,
        raw_lines=False,
        max_size=reader.max_size,
        quiet=True,
        warc_reader=reader.warc_reader,
        allow_truncated=reader.allow_truncated,
    ):
        if isinstance(item, Document):
            yield item


@dataclass
class BatchStats:
    documents: int = 0
    unique: int = 0
    duplicate: int = 0
    seen: int = 0
    #: Of the seen documents, those met again with the bytes they were filed with: not extracted again.
    unchanged: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Progress:
    """A one-line progress display on a terminal (stderr), four times a second; silent when stderr is not a
    terminal. With ``fraction`` (how much of the input has been read, in bytes), it shows the share done and
    the time left at the rate so far. Written here rather than with a progress-bar library: the line needs
    the run's own counts, and the share comes from input bytes (no count of documents is known before the
    end), which such a library would be handed the same way."""

    def __init__(self, enabled: bool | None = None, fraction: Callable[[], float | None] | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.fraction = fraction
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, stats: BatchStats, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self.last < 0.25:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = stats.documents / elapsed
        done = self.fraction() if self.fraction is not None else None
        share = ""
        if done is not None and not final:
            left = elapsed * (1 - done) / done if done > 0.001 else None
            share = f" ({done:.0%}" + (f", {_clock(left)} left" if left is not None else "") + ")"
        sys.stderr.write(
            f"\r{stats.documents:,} documents{share}, {stats.duplicate:,} near-duplicates, "
            f"{sum(stats.skipped.values()):,} skipped, {rate:,.0f} docs/s\x1b[K"
        )
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _clock(seconds: float) -> str:
    """``1:02:03`` or ``2:03``."""
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class BatchDeduplicator:
    def __init__(self, config: Config, spider: str = "dedup", workers: int | None = None, reset: bool = False) -> None:
        """``config`` names the store (``NEARDUP_STORE_URL``, ``NEARDUP_STORE_CLASS``; ``memory://`` when it
        names none) and ``spider`` is the name its default file and Redis keys are made from, as a crawl's."""
        if config.store_url is None and config.store_class is None:
            config = replace(config, store_url="memory://")
        self.config = config
        self.store: Store = build_store(config, spider, data_dir=".scrapy")
        self.detector = new_detector(config, build_algorithm(config), self.store)
        self.guard = build_template_guard(config, self.detector.algorithm)
        self.workers = max(1, resolved_workers(workers))
        self.reset = reset

    def _unchanged(self, documents: Iterable[Document | RawLine]) -> Iterator[Document | RawLine | Unchanged]:
        """The documents, those filed before with the same bytes as :class:`Unchanged` (one store read each,
        their last-seen times set as a lookup sets them): a rerun over a store decides only what is new or
        changed. Parsed here (a JSON line costs a fraction of a millisecond, its extraction ten or more)."""
        store = self.detector.store
        for chunk in _chunks(documents, BATCH):
            parsed = [_document(item) for item in chunk]
            seen: list[str] = []
            out: list[Document | RawLine | Unchanged] = []
            for item, doc in zip(chunk, parsed):
                if isinstance(doc, Unreadable):
                    out.append(item)  # reported in its turn, by the worker that cannot read it either
                    continue
                record = store.get(doc.url)
                if record is None or record.body is None or record.orphaned or record.body != document_digest(doc):
                    out.append(doc)
                    continue
                if self.detector.max_age_secs is not None and (
                    record.seen is None or record.seen < time.time() - self.detector.max_age_secs
                ):
                    out.append(doc)  # expired: checked afresh, as the decision would
                    continue
                seen.append(doc.url)
                out.append(Unchanged(doc.url, record.similarity))
            if seen:
                store.touch(seen)
            yield from out

    def _results(self, documents: Iterable[Document | RawLine | Unchanged]) -> Iterator[_Result]:
        """Prepared documents in input order: in the extraction runtime's worker processes fed whole batches,
        or in this process for one worker or an input of a single batch (where starting a pool would cost
        more than it saves). A batch whose worker died or timed out is done again one document a task, so
        only the document that caused it is lost (skip reason ``error``)."""
        batches = _worker_batches(documents)
        head = list(islice(batches, 2))
        if self.workers == 1 or len(head) < 2:
            init_worker(self.config, in_worker=False)
            for batch in chain(head, batches):
                yield from prepare_batch(batch)
            return
        pool = ExtractionPool(
            self.config,
            self.workers,
            timeout=self.config.worker_timeout,
            max_tasks=self.config.worker_max_tasks,
            fork_first=True,
        )
        pool.start()
        try:
            for (batch,), done in in_order(pool, prepare_batch, ((b,) for b in chain(head, batches)), 2 * self.workers):
                if done.exception() is None:
                    yield from done.result()
                    continue
                for (item,), alone in in_order(pool, prepare_batch, (([item],) for item in batch), 2 * self.workers):
                    error = alone.exception()
                    yield from alone.result() if error is None else [_lost(item, error)]
        finally:
            pool.close()

    def _seen(self, unchanged: Unchanged) -> Verdict | None:
        """The *seen* verdict of a document filed before with the same bytes, as the decision would make it:
        its group's page now (re-pointed by the pages decided before it, maybe); ``None`` when its record is
        gone or orphaned meanwhile."""
        root = self.detector.group_of(unchanged.url)
        return None if root is None else Verdict("seen", unchanged.url, root, unchanged.similarity)

    def _declared(
        self, url: str, given: Declaration | None, prepared: Prepared, ahead: DeclaredAhead | None
    ) -> Declared | None:
        """The page a document declares canonical, with the page itself when it comes later in the input."""
        if not self.config.canonical:
            return None
        declaration = chosen(given, prepared.declared_canonical)
        if declaration is None or declaration.url == url:
            return None
        return (ahead.take(declaration.url) if ahead is not None else None) or Declared(declaration.url)

    def run(
        self,
        documents: DocumentReader | Iterable[Document],
        on_verdict: Callable[[Verdict], None],
        progress: Progress | None = None,
        stats: BatchStats | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_fingerprint: Callable[[str, Fingerprint], None] | None = None,
    ) -> BatchStats:
        """Decide every document in input order. Decisions go to the store in batches of ``BATCH``
        documents (one or two round trips each on Redis), with the same verdicts as one by one.

        ``should_stop`` is asked between documents: when it answers true, the documents decided so far are
        flushed, the store is closed and the run ends early, with the store and ``on_verdict``'s output
        agreeing on what was decided. ``stats`` (given, or new) is filled as the run goes. ``on_fingerprint``
        is given each decided document's key and fingerprint, in input order (``dedup --all-pairs``)."""
        stats = stats if stats is not None else BatchStats()
        started = time.perf_counter()
        self.config, self.detector, note = open_detector(self.config, self.store, reset=self.reset)
        self.detector.begin_session()
        if note:
            print(f"scrapy-neardup: {note.replace('NEARDUP_RESET = True', '--reset')}", file=sys.stderr)
            self.guard = build_template_guard(self.config, self.detector.algorithm)
        loop = DecisionLoop(self.detector, self.guard, batch=BATCH)
        ahead = DeclaredAhead.scan(self.config, documents) if isinstance(documents, DocumentReader) else None
        # A store that held documents: those met again with the same bytes are not extracted again (but where
        # every fingerprint is asked for: --all-pairs compares each document with every other).
        rerun = on_fingerprint is None and self.detector.store.count() > 0
        inputs = self._unchanged(documents) if rerun else documents

        def report(decisions: list[Decision]) -> None:
            for decision in decisions:
                if decision.again:  # reported when a copy brought it in
                    continue
                if on_fingerprint is not None and decision.prepared.fingerprint is not None:
                    on_fingerprint(decision.key, decision.prepared.fingerprint)
                verdict = decision.verdict
                setattr(stats, verdict.status, getattr(stats, verdict.status) + 1)
                on_verdict(verdict)

        try:
            for result in self._results(inputs):
                if isinstance(result, Unchanged):
                    report(loop.flush())  # the pages decided before it come first
                    verdict = self._seen(result)
                    stats.documents += 1
                    if verdict is None:  # removed meanwhile (another process): nothing to say of it
                        stats.skipped["store_error"] = stats.skipped.get("store_error", 0) + 1
                        continue
                    stats.seen += 1
                    stats.unchanged += 1
                    on_verdict(verdict)
                    if progress is not None:
                        progress.update(stats)
                    if should_stop is not None and should_stop():
                        break
                    continue
                if isinstance(result, Unreadable):
                    if isinstance(documents, DocumentReader):
                        documents.bad_line(result.message)
                    continue
                url = result.url
                stats.documents += 1
                prepared = replace(Prepared.from_wire(result.wire), body=result.body)
                if prepared.fingerprint is None:
                    reason = prepared.skip_reason
                    stats.skipped[reason] = stats.skipped.get(reason, 0) + 1
                    continue
                report(loop.decide(url, url, prepared, self._declared(url, result.declared, prepared, ahead)))
                if progress is not None:
                    progress.update(stats)
                if should_stop is not None and should_stop():
                    break
            report(loop.flush())
        finally:
            self.detector.close()
        stats.seconds = time.perf_counter() - started
        if progress is not None:
            progress.update(stats, final=True)
        return stats
