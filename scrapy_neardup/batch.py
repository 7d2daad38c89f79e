"""Offline near-duplicate detection over crawl dumps: the engine of ``scrapy-neardup dedup``.

Documents stream from the readers; extraction and fingerprinting (the costly, independent part) run in a
pool of worker processes, in input order; the decision runs in this process against the store, exactly as
in a crawl. Memory holds the index (in the store) and a bounded window of documents in flight, not the input.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ._config import Config
from .engine.detector import Detector, Verdict
from .engine.pipeline import DocumentPipeline, Prepared
from .inputs import Document
from .store import Store, store_from_url

_worker_pipeline: DocumentPipeline | None = None


def _init_worker(config: Config) -> None:
    global _worker_pipeline
    _worker_pipeline = config.build_pipeline()


def _prepare_in_worker(doc: Document) -> tuple[str, Prepared]:
    assert _worker_pipeline is not None
    return doc.url, prepare(_worker_pipeline, doc)


def prepare(pipeline: DocumentPipeline, doc: Document) -> Prepared:
    try:
        if doc.html is not None:
            return pipeline.from_html(doc.html, doc.url)
        return pipeline.from_text(doc.text or "")
    except Exception:  # one pathological document never ends a run
        return Prepared(None, "error")


@dataclass
class BatchStats:
    documents: int = 0
    unique: int = 0
    duplicate: int = 0
    seen: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Progress:
    """A one-line progress display on a terminal (stderr); silent when stderr is not a terminal."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, stats: BatchStats, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self.last < 0.25:
            return
        self.last = now
        rate = stats.documents / max(now - self.start, 1e-9)
        sys.stderr.write(
            f"\r{stats.documents:,} documents, {stats.duplicate:,} near-duplicates, "
            f"{sum(stats.skipped.values()):,} skipped, {rate:,.0f} docs/s"
        )
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


class BatchDeduplicator:
    def __init__(self, config: Config, store_url: str = "memory://", workers: int | None = None,
                 reset: bool = False) -> None:
        self.config = config
        self.store: Store = store_from_url(store_url)
        self.detector = Detector(config.build_algorithm(), self.store)
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self.reset = reset

    def _prepared(self, documents: Iterable[Document]) -> Iterator[tuple[str, Prepared]]:
        if self.workers == 1:
            pipeline = self.config.build_pipeline()
            for doc in documents:
                yield doc.url, prepare(pipeline, doc)
            return
        ctx = multiprocessing.get_context("spawn" if sys.platform == "darwin" else None)
        with ctx.Pool(self.workers, initializer=_init_worker, initargs=(self.config,)) as pool:
            yield from pool.imap(_prepare_in_worker, documents, chunksize=16)

    def run(self, documents: Iterable[Document], on_verdict: Callable[[Verdict], None],
            progress: Progress | None = None) -> BatchStats:
        stats = BatchStats()
        started = time.perf_counter()
        self.detector.open(reset=self.reset)
        try:
            for url, prepared in self._prepared(documents):
                stats.documents += 1
                if prepared.fingerprint is None:
                    stats.skipped[prepared.skip_reason] = stats.skipped.get(prepared.skip_reason, 0) + 1
                else:
                    known = self.store.get(url)
                    if known is not None:
                        verdict = Verdict("seen", url, known.canonical or url, known.similarity)
                    else:
                        fp = prepared.fingerprint
                        verdict = self.detector.check_fingerprint(url, fp.signature, fp.buckets)
                    setattr(stats, verdict.status, getattr(stats, verdict.status) + 1)
                    on_verdict(verdict)
                if progress is not None:
                    progress.update(stats)
        finally:
            self.detector.close()
        stats.seconds = time.perf_counter() - started
        if progress is not None:
            progress.update(stats, final=True)
        return stats
