"""Where a crawl's documents are extracted and fingerprinted: the extraction worker processes
(``NEARDUP_WORKERS`` >= 1), or threads of the crawler process (``NEARDUP_WORKERS = 0``); nothing is decided here.

A worker's result is read by the reactor (:class:`.reactor.ReactorIO`) and handed to the page that waits for
it. Byte-identical responses share one job (:mod:`.bodies`). A page goes with its host's learned selectors
(:mod:`.templates`) as they are when a worker takes it, not when it joined the queue of pages waiting for one.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.python.threadpool import ThreadPool

from ..engine.canonical import declared_canonical
from ..engine.extract import decode_html, quiet_trafilatura
from ..engine.prepare import Prepared
from ..store import BODY_DIGEST_BYTES
from ..workers import IN_PROCESS, AtSend, ExtractionPool, WorkerLost, WorkerTimeout, made
from .bodies import IdenticalBodies, body_digest
from .reactor import pool_reader, reply
from .screening import Job, Skip

if TYPE_CHECKING:
    from ..engine.prepare import DocumentPipeline
    from ..settings import Config
    from .reporting import Reporter
    from .templates import LearnedTemplates


@dataclass(frozen=True)
class WorkersRenewed:
    """Extraction workers renewed in a crawl: ``replaced`` (one died or timed out), ``recycled`` (one
    retired after ``NEARDUP_WORKER_MAX_TASKS`` pages)."""

    replaced: int = 0
    recycled: int = 0


class Preparer:
    """The crawl's extraction: ``workers`` processes, or ``threads`` threads of this process when
    ``workers`` is 0. Started when the spider opens, stopped when it closes; a document given before or
    after is skipped as ``store_closed``."""

    def __init__(
        self,
        config: Config,
        pipeline: DocumentPipeline,
        workers: int,
        threads: int,
        report: Reporter,
        templates: LearnedTemplates | None,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.workers = workers
        self.threads = threads
        self.report = report
        self.templates = templates
        self._extraction: ExtractionPool | None = None
        self._bodies: IdenticalBodies | None = None  # byte-identical responses share one job (with workers)
        self._threads: ThreadPool | None = None
        self.closing = False

    def start(self) -> None:
        config = self.config
        if self.workers:
            self._extraction = ExtractionPool(
                config,
                self.workers,
                timeout=config.worker_timeout,
                max_tasks=config.worker_max_tasks,
                nice=config.worker_nice,
            )
            self._extraction.start(pool_reader(), wait=False)  # the crawl fetches its first pages meanwhile
            if config.body_cache_size:
                self._bodies = IdenticalBodies(config.body_cache_size)
        else:
            quiet_trafilatura()
            self._threads = ThreadPool(0, self.threads, name="scrapy-neardup")
            self._threads.start()

    @property
    def running(self) -> bool:
        return not self.closing and (self._extraction is not None or self._threads is not None)

    def pids(self) -> list[int]:
        """The process ids of the extraction workers running now; empty without worker processes."""
        extraction = self._extraction
        return extraction.pids() if extraction is not None else []

    def close(self) -> WorkersRenewed:
        """Stop the workers (here, on the reactor, which reads their pipes) or the threads: how many workers
        were renewed during the crawl, for its stats."""
        self.closing = True
        extraction, threads, self._extraction, self._threads = self._extraction, self._threads, None, None
        if threads is not None:
            threads.stop()
        if extraction is None:
            return WorkersRenewed()
        extraction.close()
        return WorkersRenewed(extraction.replaced, extraction.recycled)

    async def prepare(self, job: Job, url: str | None = None, relearn: bool = False) -> Prepared | Skip:
        """Extract and fingerprint a document: what was prepared, or why it was not (a lost worker, a
        timeout, an unexpected error, the crawl closing), with what went wrong. A page goes with its host's
        learned selectors (none when ``relearn``: trafilatura alone). A page's result carries the digest of
        its bytes (:attr:`Prepared.body`)."""
        if not self.running:
            return Skip("store_closed")
        deferred: Deferred = Deferred()
        offers = None
        if self.templates is not None and job.is_html and not relearn:
            offers = AtSend(partial(self.templates.offers, url or job.url))  # as known when a worker takes it
        digest = body_digest(job.body, job.content_type) if job.body is not None else None
        fn, *args = job.call(offers)
        try:
            if self._extraction is not None:
                extraction, copy_of = self._extraction, None
                if self._bodies is not None and digest is not None and not relearn:
                    future, first_url = self._bodies.share(digest, args[1], lambda: extraction.submit(fn, *args))
                    copy_of = None if first_url is None else (job, first_url)
                else:
                    future = extraction.submit(fn, *args)
                future.add_done_callback(lambda done: self._analysed(done, deferred, copy_of))
            else:
                assert self._threads is not None
                self._threads.callInThread(self._analyse_here, fn, args, deferred)
        except RuntimeError:  # the pool closed under us: the spider is closing
            return Skip("store_closed")
        got = await maybe_deferred_to_future(deferred)
        if isinstance(got, Prepared):
            self.report.cpu_seconds += got.cpu_seconds
            return got if digest is None else replace(got, body=digest[:BODY_DIGEST_BYTES])
        if isinstance(got, WorkerTimeout):
            return Skip("store_closed" if self.closing else "timeout", got)
        if isinstance(got, WorkerLost):
            return Skip("store_closed" if self.closing else "worker_lost", got)
        return Skip("error", got)

    def _analysed(self, done: Future, deferred: Deferred, copy_of: tuple[Job, str] | None = None) -> None:
        """A worker's result for this page, or, with ``copy_of`` (the page's job, and the URL of the page
        the job was made for), the result of another response with the same bytes."""
        try:
            prepared = Prepared.from_wire(done.result())
        except Exception as exc:  # noqa: BLE001 - WorkerLost, WorkerTimeout, or a bug: never a lost page
            if copy_of is not None and not self.closing:  # the other page's job failed: this page's own
                self._extract_alone(copy_of[0], deferred)
                return
            reply(deferred, exc)
            return
        if copy_of is not None:
            prepared = self._as_copy(prepared, *copy_of)
        reply(deferred, prepared)

    @staticmethod
    def _as_copy(prepared: Prepared, job: Job, first_url: str) -> Prepared:
        """Another response's result for this one, with the same bytes: only a relative declared canonical
        depends on the page's URL, so it is read again against this page's URL."""
        body, page_url, content_type = job.body, job.url, job.content_type
        assert body is not None and page_url is not None
        canonical = prepared.declared_canonical
        if canonical is not None and page_url != first_url:
            canonical = declared_canonical(decode_html(body, content_type), page_url)
        return replace(
            prepared,
            reused=True,
            extract_seconds=0.0,
            work_seconds=0.0,
            work_started=0.0,
            cpu_seconds=0.0,
            declared_canonical=canonical,
        )

    def _extract_alone(self, job: Job, deferred: Deferred) -> None:
        """This page's own job, after the job of another response with its bytes failed (a lost worker is
        counted for the page it held, not for its copies)."""
        fn, *args = job.call()
        try:
            if self._extraction is None:
                raise RuntimeError("the extraction pool is closed")
            future = self._extraction.submit(fn, *args)
        except RuntimeError:
            reply(deferred, WorkerLost("the extraction pool was stopped"))
            return
        future.add_done_callback(lambda done: self._analysed(done, deferred))

    def _analyse_here(self, fn: Any, args: list[Any], deferred: Deferred) -> None:
        try:
            prepared = IN_PROCESS[fn](self.pipeline, *made(args))
        except Exception as exc:  # noqa: BLE001 - a page must never crash the crawl
            reply(deferred, exc)
            return
        reply(deferred, prepared)
