"""The crawler-scoped core that the Scrapy components share: one config, one store, one detector.

The downloader middleware, the spider middleware and the pipeline each call :meth:`NearDupService.for_crawler`
and get the same instance, so a crawler has exactly one store connection. The store is opened when
the first component is built (a store that cannot be opened fails the crawl's start-up) and flushed and
closed on ``spider_closed``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.project import data_path
from twisted.internet.defer import Deferred
from twisted.python.threadpool import ThreadPool

from ..assembly import (
    build_pipeline,
    build_rule_book,
    build_store,
    build_template_guard,
    build_template_learner,
    open_detector,
)
from ..engine.canonical import Declaration, chosen, declared_canonical
from ..engine.decisions import Decision, DecisionLoop, Declared
from ..engine.detector import Detector, Verdict
from ..engine.extract import decode_html, quiet_trafilatura
from ..engine.prepare import Prepared
from ..engine.template import TemplateGuard
from ..engine.urlrules import Learner, Prediction, host_of
from ..settings import Config, ConfigError, unknown_settings
from ..store import Store, StoreError, StoreMismatchError, StoreWriteError, redact_url
from ..store.books import CrawlBooks
from ..workers import IN_PROCESS, ExtractionPool, WorkerLost, WorkerTimeout
from .bodies import IdenticalBodies, body_digest
from .reactor import in_thread, pool_reader, reply
from .reporting import Reporter
from .screening import Job
from .soft404 import Answer, HostAnswers, ShortTextGroups, soft404_similarity
from .templates import LearnedTemplates

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

logger = logging.getLogger("scrapy_neardup")

#: Fetches the page a response declares canonical, before the response is decided: given the response's
#: key and the declared URL, the :class:`Declared` page (or ``None`` to decide without it).
Resolver = Callable[[str, str], Awaitable["Declared | None"]]


@dataclass(frozen=True)
class Outcome:
    """What the decision made of a page: what was prepared (its filed text), its verdict or the store's
    failure (``None``: not decided, the store is closing), how many earlier pages the template guard
    re-filed, and the decisions made ``before`` it (the declared page it brought in)."""

    prepared: Prepared
    result: Verdict | StoreError | None = None
    refiled: int = 0
    before: tuple[Decision, ...] = ()
    again: bool = False
    #: CPU time the decision took in the crawler process (for the crawl's books).
    cpu_seconds: float = 0.0


def _scrapy_version() -> tuple[int, ...]:
    import scrapy

    return tuple(int(part) for part in scrapy.__version__.split(".")[:2] if part.isdigit())


#: Scrapy closes the spider when a ``spider_opened`` handler raises ``CloseSpider`` from 2.18 on; before,
#: it logs the exception and crawls on.
_CLOSE_FROM_OPENED = _scrapy_version() >= (2, 18)
#: From 2.15 on, a component that raises while Scrapy builds it fails the crawl's start-up with exit status 1
#: (scrapy/scrapy#7255); before, the process exits 0 with a traceback, so there the crawl is stopped when
#: the spider opens instead, with the finish reason.
_FAILS_START_UP = _scrapy_version() >= (2, 15)


def _process_name() -> str:
    """This crawl process, as its books name it: host and pid."""
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


_services: weakref.WeakKeyDictionary[Any, NearDupService] = weakref.WeakKeyDictionary()
#: Crawlers whose misspelt NEARDUP_* names were warned about.
_warned: weakref.WeakSet[Any] = weakref.WeakSet()


class _ReportedOnce(logging.Filter):
    """Drops the log records that carry an exception already reported in one line of the plugin's own:
    Scrapy's start-up failure reports (asyncio's "Task exception was never retrieved" with the exception
    attached; with a Twisted reactor, "Unhandled error in Deferred" and the traceback as text) would bury
    that line under a traceback of Scrapy's code. Installed only once such an exception was reported."""

    _texts: set[str] = set()

    @classmethod
    def mark(cls, exc: BaseException) -> None:
        exc.neardup_reported = True  # type: ignore[attr-defined]
        if not cls._texts:
            for name in ("asyncio", "twisted"):
                logging.getLogger(name).addFilter(cls())
        cls._texts.add(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if getattr(exc, "neardup_reported", False):
            return False
        message = record.getMessage()
        return not (message.startswith("Unhandled error in Deferred") or any(t in message for t in self._texts))


class StoreOpenFailed(Exception):
    """The store could not be opened, or holds fingerprints of other parameters: ``reason`` is the finish
    reason (``neardup_store_error`` or ``neardup_store_mismatch``), ``message`` the one line that says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class NearDupService:
    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.pipeline = build_pipeline(config)
        self.algorithm = self.pipeline.algorithm
        self.guard: TemplateGuard | None = build_template_guard(config, self.algorithm)
        self.detector: Detector | None = None
        self._decisions: DecisionLoop | None = None
        self.report = Reporter(crawler, config.debug)
        self.workers = config.resolved_workers()
        self._extraction: ExtractionPool | None = None  # worker processes (NEARDUP_WORKERS >= 1)
        self._bodies: IdenticalBodies | None = None  # byte-identical responses share one job (with workers)
        self._threads: ThreadPool | None = None  # in-process extraction (NEARDUP_WORKERS = 0)
        self._thread_count = max(1, crawler.settings.getint("REACTOR_THREADPOOL_MAXSIZE", 10))
        self._store_thread: ThreadPool | None = None
        self._store_lock = threading.Lock()
        self._stopping = False
        self._closing = False
        #: Why the store could not be opened (a finish reason), once it could not: no response goes through.
        self.refused: str | None = None
        self._initial = 0  # pages in the store when it was opened
        self._expired = 0  # pages forgotten at open (NEARDUP_EXPIRATION_SECS)
        #: The URL rules (NEARDUP_URL_RULES), used on the store thread; and the hosts that have a confident
        #: rule, a snapshot the reactor reads before it asks for a prediction.
        self.rules: Learner | None = None
        self.ruled_hosts: frozenset[str] = frozenset()
        #: Each host's answer to a URL that cannot exist, and its groups of unrelated URLs sharing one short
        #: text (NEARDUP_SOFT404).
        self.soft404_answers = HostAnswers()
        self.short_groups = ShortTextGroups()
        #: The learned templates (NEARDUP_LEARN_TEMPLATES), once the store is open.
        self.templates: LearnedTemplates | None = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> NearDupService:
        """The crawler's service, built on first use; ``NotConfigured`` when ``NEARDUP_ENABLED`` is false."""
        service = _services.get(crawler)
        if service is None:
            try:
                config = Config.from_settings(crawler.settings)
            except ConfigError as exc:
                # Raised, so that Scrapy fails the start-up (exit status 1). Scrapy would then print it again
                # inside a long traceback of its own start-up code ("Task exception was never retrieved");
                # this one line says it all, and that report is filtered out (see _ReportedOnce).
                logger.error("scrapy-neardup: the crawl cannot start: %s", exc)
                _ReportedOnce.mark(exc)
                raise
            if crawler not in _warned:  # each component asks: said once per crawler, enabled or not
                _warned.add(crawler)
                for line in unknown_settings(crawler.settings):
                    logger.warning("scrapy-neardup: %s", line)
            if not config.enabled:
                raise NotConfigured("scrapy-neardup is disabled: set NEARDUP_ENABLED = True to enable it")
            service = cls(crawler, config)
            spider = getattr(crawler, "spider", None)
            if spider is not None:
                try:
                    service.open_store(spider.name)
                except StoreOpenFailed as exc:
                    if _FAILS_START_UP:  # Scrapy fails the start-up (exit status 1); open_store said why
                        _ReportedOnce.mark(exc)
                        raise
                    service.refused = exc.reason  # the spider is closed as it opens (see spider_opened)
            _services[crawler] = service
        return service

    # -- lifecycle ---------------------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """The process ids of the extraction workers running now (diagnostics: a benchmark reads their CPU
        time and memory); empty without worker processes."""
        extraction = self._extraction
        return extraction.pids() if extraction is not None else []

    def open_store(self, spider_name: str) -> None:
        """Open the store, its detector and the URL rules. Called when the components are built, before the
        spider opens, so that a store that cannot be opened (or holds fingerprints of other parameters) fails
        the crawl's start-up, as a bad setting does: one ERROR line (said here, before
        :class:`StoreOpenFailed` is raised), no page fetched, and ``scrapy crawl`` exits with status 1 (Scrapy
        sets it only for a crawl that fails to start)."""
        config = self.config
        url = config.resolve_store_url(spider_name, data_path("", createdir=False))
        store: Store | None = None
        try:
            store = build_store(config, spider_name, data_path("", createdir=False))  # no redis-py: fails here
            adopted, detector, note = open_detector(config, store, reset=config.reset)
            self._expired = self._expire(store) if config.expiration_secs else 0
            self._initial = store.count()
        except Exception as exc:  # whatever failed, no page may go through unchecked
            # Fingerprints that cannot be compared, or no store at all: crawling on would let every
            # near-duplicate through unnoticed.
            message = (
                str(exc)
                if isinstance(exc, StoreError)
                else (f"cannot open the store {redact_url(url)}: {type(exc).__name__}: {redact_url(str(exc))}")
            )
            if store is not None:
                try:
                    store.close()
                except Exception:  # noqa: BLE001 - it failed to open; closing is a courtesy
                    pass
            reason = "neardup_store_mismatch" if isinstance(exc, StoreMismatchError) else "neardup_store_error"
            logger.error("scrapy-neardup: the crawl cannot start (%s): %s", reason, message)
            raise StoreOpenFailed(reason, message) from exc
        if note:
            # The threshold changed and the store's index was kept (see assembly.open_detector): the workers,
            # the guard and the decisions use the store's index from now on.
            logger.warning("scrapy-neardup: %s", note)
            self.config = config = adopted
            self.pipeline = build_pipeline(config)
            self.algorithm = detector.algorithm
            self.guard = build_template_guard(config, self.algorithm)
        self.detector = detector
        self._decisions = DecisionLoop(detector, self.guard)
        learner = build_template_learner(config)
        if learner is not None:
            self.templates = LearnedTemplates(learner, self.stats)
            self.templates.sync(store, force=True)
        warning = detector.algorithm.scale_warning()
        if warning:
            logger.warning("scrapy-neardup: %s", warning)
        if config.url_rules != "off":
            try:
                self.rules = Learner(build_rule_book(config), store, detector.group_of)
                self._rules_changed()
                curated = self.rules.book.curated
                if config.url_rules_file:
                    logger.info(
                        "scrapy-neardup: %d hand-written URL rules of %d domains from %s (NEARDUP_URL_RULES_FILE)",
                        sum(len(r) for r in curated.rules.values()),
                        len(curated.rules),
                        config.url_rules_file,
                    )
                for line in curated.left:
                    logger.warning("scrapy-neardup: %s; left out", line)
            except StoreError as exc:  # the rules are an economy: the crawl goes on without them
                logger.warning("scrapy-neardup: URL rules off for this crawl: %s", exc)

    def spider_opened(self, spider: Spider) -> None:
        config = self.config
        if self.detector is None:
            # The store could not be opened on a Scrapy that does not fail a start-up (said already), or the
            # components were built without a spider (not by ``scrapy crawl``) and it opens now: a failure
            # closes the spider before any response goes through.
            if self.refused is None:
                try:
                    self.open_store(spider.name)
                except StoreOpenFailed as exc:
                    self.refused = exc.reason
            if self.refused is not None:
                if _CLOSE_FROM_OPENED:
                    raise CloseSpider(self.refused)
                # Older Scrapy logs a CloseSpider raised here and crawls on: close the spider once it is
                # open, and until then no response goes through (see NearDupDownloaderMiddleware).
                from twisted.internet import reactor

                reactor.callLater(0, self._close_spider, self.refused)  # type: ignore[arg-type]
                return
            config = self.config
        assert self.detector is not None
        store = self.detector.store
        initial, expired = self._initial, self._expired
        self._store_thread = ThreadPool(0, 1, name="scrapy-neardup-store")
        self._store_thread.start()
        if self.workers:
            self._extraction = ExtractionPool(
                config, self.workers, timeout=config.worker_timeout, max_tasks=config.worker_max_tasks
            )
            self._extraction.start(pool_reader())
            if config.body_cache_size:
                self._bodies = IdenticalBodies(config.body_cache_size)
        else:
            quiet_trafilatura()
            self._threads = ThreadPool(0, self._thread_count, name="scrapy-neardup")
            self._threads.start()
        self.stats.set_value("neardup/initial", initial)
        if expired:
            self.stats.set_value("neardup/expired", expired)
        logger.info(
            "scrapy-neardup: store %s, %s, threshold %.3g, action %s, %d fingerprints already stored; extraction in %s",
            store.location,
            ", ".join(f"{k}={v}" for k, v in self.algorithm.params().items()),
            self.algorithm.threshold,
            self.config.action,
            initial,
            f"{self.workers} worker processes" if self.workers else f"{self._thread_count} threads of this process",
            extra={"spider": spider},
        )

    def _expire(self, store: Store) -> int:
        """At open, with ``NEARDUP_EXPIRATION_SECS``: forget the pages not fetched for that long. What the
        removals leave in the index is purged when they were at least a twentieth of the store (a pass
        over the whole index; below that, stale entries cost a skipped candidate now and then)."""
        started = time.monotonic()
        held = store.count()
        expired = store.expire(time.time() - self.config.expiration_secs)
        if not expired:
            return 0
        purged = ""
        if expired * 20 >= held:
            orphans = store.purge()
            purged = f"; index purged ({orphans} near-duplicates of expired pages with them)"
        logger.info(
            "scrapy-neardup: forgot %d of %d stored pages not fetched in the last %g seconds "
            "(NEARDUP_EXPIRATION_SECS)%s, in %.1f s",
            expired,
            held,
            self.config.expiration_secs,
            purged,
            time.monotonic() - started,
        )
        return expired

    async def spider_closed(self, spider: Spider, reason: str = "") -> None:
        if self.detector is None:
            return
        self._closing = True
        detector, store_thread, threads, extraction = self.detector, self._store_thread, self._threads, self._extraction
        self.detector, self._store_thread, self._threads, self._extraction = None, None, None, None
        self._decisions = None
        if extraction is not None:
            try:
                extraction.close()  # here, on the reactor, which reads the workers' pipes
            except Exception:  # the store must still be flushed and closed below
                logger.exception("scrapy-neardup: stopping the extraction workers failed", extra={"spider": spider})
            for name, value in (("replaced", extraction.replaced), ("recycled", extraction.recycled)):
                if value:
                    self.stats.set_value(f"neardup/workers/{name}", value)
        books = self.report.books(detector.session_started, _process_name(), self.soft404_answers.hosts_with_answer)
        try:
            if store_thread is not None:
                await in_thread(store_thread, self._close_store, detector, books)
            else:
                self._close_store(detector, books)
        except Exception as exc:  # noqa: BLE001 - the crawl must still end, and say what was lost
            unsaved = exc.unsaved if isinstance(exc, StoreWriteError) else 0
            if unsaved:
                self.stats.inc_value("neardup/unsaved", unsaved)
            logger.error(
                "scrapy-neardup: closing the store failed; %s: %s",
                f"the fingerprints of the last {unsaved} pages filed were not saved"
                if unsaved
                else "what it had not yet saved may be lost",
                exc,
                extra={"spider": spider},
            )
        finally:
            # Whatever the store did at close, no thread of ours may keep the process alive.
            for pool in (store_thread, threads):
                if pool is not None:
                    pool.stop()
        if self.config.soft404:
            self.stats.set_value("neardup/soft404/hosts", self.soft404_answers.hosts_with_answer)
        self.report.log_summary(spider)

    # -- the work ----------------------------------------------------------------------------------
    async def check(
        self,
        key: str,
        job: Job | str,
        url: str | None = None,
        declaration: Declaration | None = None,
        own_key: bool = False,
        resolve: Resolver | None = None,
        probe: Callable[[str], Awaitable[Answer]] | None = None,
    ) -> tuple[Prepared, Verdict | None]:
        """Analyse a document (extract and fingerprint it, in a worker), decide which text it is filed on
        (the template guard) and check-and-insert it in the store, under ``key``.

        Returns what was prepared and the verdict, or ``None`` when the document was skipped or the store
        failed (both counted and logged here). ``job`` is :func:`.screening.response_job` or
        :func:`.screening.text_job`; a string is a reason to skip. ``declaration``: the canonical URL the
        response's ``Link`` header declares (the page's own ``<link rel="canonical">`` comes back from the worker); with
        ``NEARDUP_CANONICAL`` it is weighed by the rules of :mod:`scrapy_neardup.engine.canonical`, unless
        ``own_key`` says the key was given (``neardup_key``). ``resolve`` may fetch the declared page first
        (the downloader middleware's, for a page of the same site): it is given the key and the declared URL
        and returns the :class:`Declared` page, or ``None`` to decide without it. ``probe`` fetches a URL of
        the page's host that cannot exist (``NEARDUP_SOFT404``): a page that is a near-duplicate of that
        answer is a soft-404 page, never filed (:mod:`.soft404`).

        A worker's result is read by the reactor (:class:`ReactorIO`); a local store (SQLite, memory: well
        under a millisecond a page) decides right there, Redis on the plugin's store thread, which wakes the
        reactor once the page is decided. Either way the template decision and the store call run in the
        order pages are decided, under the store lock. A store that is retrying never holds the reactor,
        nor its threads, which Scrapy's DNS resolver needs.
        """
        if isinstance(job, str):
            self.report.skip(job, key)
            return Prepared(None, job), None
        if self.detector is None or self._store_thread is None:
            self.report.skip("store_closed", key)
            return Prepared(None, "store_closed"), None
        prepared = await self.prepare(job, url)
        if isinstance(prepared, BaseException):
            return self._settle(key, prepared)
        if self.templates is not None and not self.templates.observe(url, prepared):
            prepared = await self.prepare(job, url, relearn=True)  # replayed by a retired selector: not vouched for
            if isinstance(prepared, BaseException):
                return self._settle(key, prepared)
        if probe is not None and url is not None and (prepared.fingerprint is not None or prepared.short_text):
            # Pages too short to fingerprint too: most "not found" pages are a heading and a sentence.
            soft404 = await self._soft404(key, url, prepared, probe)
            if soft404 is not None:
                return prepared, soft404
        if prepared.fingerprint is None:
            return self._settle(key, Outcome(prepared))
        declared = None
        if self.config.canonical and not own_key:
            declaration = chosen(declaration, prepared.declared_canonical)
            if declaration is not None and declaration.url != key:
                declared = Declared(declaration.url)
                if resolve is not None:
                    declared = await resolve(key, declaration.url) or declared
        outcome = await self._decided(prepared, key, url, declared)
        verdict = outcome.result
        if (
            probe is not None
            and url is not None
            and isinstance(verdict, Verdict)
            and verdict.is_duplicate  # a near-duplicate, now or in an earlier crawl (seen)
            and not outcome.again
            and self.short_groups.is_soft404(url, verdict.canonical, outcome.prepared.text_length, verdict.similarity)
        ):
            outcome = replace(outcome, result=replace(verdict, status="soft404"))
        return self._settle(key, outcome)

    async def _soft404(
        self, key: str, url: str, prepared: Prepared, probe: Callable[[str], Awaitable[Answer]]
    ) -> Verdict | None:
        """The ``soft404`` verdict of a page that is a near-duplicate of its host's answer to a URL that
        cannot exist; ``None`` for any other page (or a host without such an answer)."""
        answer = await self.soft404_answers.answer(url, probe)
        if answer is None or self.detector is None:
            return None
        page, answered = answer
        if answered == url:
            return None
        similarity = soft404_similarity(self.detector, prepared, url, page, answered)
        if similarity is None:
            return None
        verdict = Verdict("soft404", key, answered, similarity)
        self.report.record(key, verdict)
        return verdict

    async def prepare(self, job: Job, url: str | None = None, relearn: bool = False) -> Prepared | BaseException:
        """Extract and fingerprint a document in a worker (or a thread of this process), nothing decided:
        what was prepared, or what went wrong (a lost worker, a timeout, an unexpected error). A page goes
        with its host's learned selectors (none when ``relearn``: trafilatura alone)."""
        deferred: Deferred = Deferred()
        offers = None
        if self.templates is not None and job.is_html:
            offers = None if relearn else self.templates.offers(url or job.url)
        fn, *args = job.call(offers)
        try:
            if self._extraction is not None:
                extraction, copy_of = self._extraction, None
                if self._bodies is not None and job.is_html and not relearn:
                    body, page_url, content_type = args[:3]
                    future, first_url = self._bodies.share(
                        body_digest(body, content_type), page_url, lambda: extraction.submit(fn, *args)
                    )
                    copy_of = None if first_url is None else (job, first_url)
                else:
                    future = extraction.submit(fn, *args)
                future.add_done_callback(lambda done: self._analysed(done, deferred, copy_of))
            else:
                assert self._threads is not None
                self._threads.callInThread(self._analyse_here, fn, args, deferred)
        except RuntimeError:  # the pool closed under us: the spider is closing
            return Prepared(None, "store_closed")
        prepared = await maybe_deferred_to_future(deferred)
        if isinstance(prepared, Prepared):
            self.report.cpu_seconds += prepared.cpu_seconds
        return prepared

    async def known(self, *keys: str) -> list[bool] | None:
        """Whether each key is filed (for the downloader middleware's choice to fetch a declared page);
        ``None`` when the store cannot say (closed, failing)."""

        def look() -> list[bool] | None:
            with self._store_lock:
                detector = self.detector
                if detector is None:
                    return None
                try:
                    return [detector.group_of(k) is not None for k in keys]
                except Exception:  # noqa: BLE001 - the decision itself will meet and count the failure
                    return None

        return await self._in_store_thread(look)

    async def admitted(self, group: str, key: str, admit_new: bool = True) -> bool:
        """Whether near-duplicate ``key`` is one of the first ``NEARDUP_GROUP_BUDGET`` of its group let
        through (:meth:`Store.admit`), admitting it while the budget lasts unless ``admit_new`` is false;
        ``False`` when the store cannot say (the copy is then dropped, as without a budget)."""
        budget = self.config.group_budget if admit_new else 0

        def admit() -> bool:
            with self._store_lock:
                detector = self.detector
                if detector is None:
                    return False
                try:
                    return detector.store.admit(group, key, budget)
                except StoreError as exc:
                    logger.warning("scrapy-neardup: the group budget of %s could not be read: %s", group, exc)
                    return False

        return bool(await self._in_store_thread(admit))

    async def _in_store_thread(self, fn: Any) -> Any:
        """``fn`` where store calls are made: here for a local store, else on the store thread."""
        detector, store_thread = self.detector, self._store_thread
        if detector is None or store_thread is None:
            return None
        if detector.store.local or self._closing:
            return fn()
        return await in_thread(store_thread, fn)

    # -- prepare(): the reactor reads the worker's result, or an extraction thread --------------------
    def _analysed(
        self,
        done: Future,
        deferred: Deferred,
        copy_of: tuple[Job, str] | None = None,
    ) -> None:
        """A worker's result for this page, or, with ``copy_of`` (the page's job, and the URL of the page
        the job was made for), the result of another response with the same bytes."""
        try:
            prepared = Prepared.from_wire(done.result())
        except Exception as exc:  # noqa: BLE001 - WorkerLost, WorkerTimeout, or a bug: never a lost page
            if copy_of is not None and not self._closing:  # the other page's job failed: this page's own
                self._extract_alone(copy_of[0], deferred)
                return
            reply(deferred, exc)
            return
        if copy_of is not None:
            prepared = self._as_copy(prepared, *copy_of)
        reply(deferred, prepared)

    def _as_copy(self, prepared: Prepared, job: Job, first_url: str) -> Prepared:
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
            prepared = IN_PROCESS[fn](self.pipeline, *args)
        except Exception as exc:  # noqa: BLE001 - a page must never crash the crawl
            reply(deferred, exc)
            return
        reply(deferred, prepared)

    # -- the decision: here for a local store, on the store thread for Redis ------------------------------
    async def _decided(self, prepared: Prepared, key: str, url: str | None, declared: Declared | None) -> Outcome:
        outcome = await self._in_store_thread(lambda: self._decide_and_file(prepared, key, url, declared))
        if outcome is None:
            return Outcome(prepared)
        self.report.cpu_seconds += outcome.cpu_seconds
        return outcome

    def _decide_and_file(self, prepared: Prepared, key: str, url: str | None, declared: Declared | None) -> Outcome:
        """The template decision, the re-filing it may ask for, the declared page's decision, and the
        check-and-insert, under the store lock (in the order pages are decided)."""
        cpu = time.thread_time()
        with self._store_lock:  # the guard's state and the store: one caller at a time
            decisions = self._decisions
            if decisions is None or self._closing:
                return Outcome(prepared)
            try:
                made = decisions.decide(key, url, prepared, declared)
            except StoreError as exc:
                return Outcome(prepared, exc)
            except Exception as exc:  # noqa: BLE001 - a backend's untranslated failure is still the store's
                return Outcome(prepared, StoreError(f"the store failed: {type(exc).__name__}: {exc}"))
            if self.rules is not None:
                self._observe(made, url)
            if self.templates is not None:
                self.templates.sync(decisions.detector.store)
        mine = made[-1]
        return Outcome(
            mine.prepared,
            mine.verdict,
            mine.refiled,
            tuple(d for d in made[:-1] if not d.again),
            mine.again,
            time.thread_time() - cpu,
        )

    def _observe(self, made: list[Decision], url: str | None) -> None:
        """Store thread, under the store lock: the URL rules learn from the pages just decided (those filed
        under their own URL: a page with a ``neardup_key`` of its own says nothing of its URL)."""
        rules = self.rules
        assert rules is not None
        try:
            synced, hosts = False, set()
            for decision in made:
                if decision.again or (decision is made[-1] and decision.key != url):
                    continue
                verdict = decision.verdict
                synced |= rules.observe(decision.key, verdict.status, verdict.canonical, verdict.displaced)
                hosts.add(host_of(decision.key))
            if synced:
                self._rules_changed()
            else:
                self.ruled_hosts = (self.ruled_hosts - hosts) | {h for h in hosts if rules.book.confident(h)}
        except Exception as exc:  # noqa: BLE001 - the rules are an economy; a failing store is met by the decisions
            logger.debug("scrapy-neardup: the URL rules could not learn from %s: %s", url, exc)

    def _rules_changed(self) -> None:
        """The hosts with a confident rule, for the reactor's first look at a request."""
        assert self.rules is not None
        book = self.rules.book
        self.ruled_hosts = frozenset(host for host in list(book.counts) if book.confident(host))

    async def predicted(self, url: str) -> Prediction | None:
        """The URL already decided that ``url`` becomes by its host's confident rules, if any (``None`` too when
        the store cannot say)."""
        rules = self.rules
        if rules is None:
            return None
        host = host_of(url)
        if host not in self.ruled_hosts and not rules.book.curated.of(host):
            return None

        def look() -> Prediction | None:
            with self._store_lock:
                detector = self.detector
                if detector is None:
                    return None
                try:
                    prediction = rules.predict(url)
                    if prediction is not None and prediction.group is not None and prediction.group != url:
                        prediction = replace(prediction, group_fetched=detector.fetched_now(prediction.group))
                    return prediction
                except Exception:  # noqa: BLE001 - fetch it: the decision will meet a failing store
                    return None

        return await self._in_store_thread(look)

    async def fetched_now(self, key: str) -> bool | None:
        """Whether ``key`` was filed or fetched again in this crawl, by any process of it (``None`` when the
        store cannot say)."""

        def look() -> bool | None:
            with self._store_lock:
                detector = self.detector
                if detector is None:
                    return None
                try:
                    return detector.fetched_now(key)
                except Exception:  # noqa: BLE001 - the store is failing: the decisions meet and count it
                    return None

        return await self._in_store_thread(look)

    def _settle(self, key: str, outcome: Outcome | BaseException) -> tuple[Prepared, Verdict | None]:
        """Reactor thread: count and log what became of a page (and of the declared page decided first)."""
        if isinstance(outcome, (WorkerLost, WorkerTimeout)):
            reason = (
                "store_closed" if self._closing else "timeout" if isinstance(outcome, WorkerTimeout) else "worker_lost"
            )
            if reason != "store_closed":
                logger.warning(
                    "scrapy-neardup: %s passed on unchecked: %s (counted in neardup/skipped/%s)",
                    key,
                    outcome,
                    reason,
                    extra={"spider": self.crawler.spider},
                )
            self.report.skip(reason, key, log=reason == "store_closed")
            return Prepared(None, reason), None
        if isinstance(outcome, BaseException):
            logger.warning(
                "scrapy-neardup: could not fingerprint %s; passed on unchecked",
                key,
                exc_info=outcome,
                extra={"spider": self.crawler.spider},
            )
            self.report.skip("error", key, log=False)
            return Prepared(None, "error"), None
        prepared, result = outcome.prepared, outcome.result
        if prepared.reused:
            self.stats.inc_value("neardup/extract/reused")
        if prepared.fingerprint is None:
            self.report.skip(prepared.skip_reason or "no_text", key)
            return prepared, None
        if outcome.refiled:
            self.stats.inc_value("neardup/extract/refiled", outcome.refiled)
        if prepared.method == "page":
            self.stats.inc_value("neardup/extract/page_text_fallback")
        elif prepared.method == "template":
            self.stats.inc_value("neardup/extract/template")
            logger.debug(
                "scrapy-neardup: %s extracted to its host's template text; fingerprinted on the page text",
                key,
                extra={"spider": self.crawler.spider},
            )
        for before in outcome.before:  # the declared page, fetched and decided first
            self.stats.inc_value("neardup/canonical/fetched_first")
            self.report.record(before.key, before.verdict)
        if isinstance(result, Verdict):
            if not outcome.again:  # else counted when a copy brought it in
                self.report.record(key, result)
                if result.displaced is not None:
                    self.stats.inc_value("neardup/repointed")
            return prepared, result
        if isinstance(result, StoreError):
            self.store_failed(key, result)
            return prepared, None
        self.report.skip("store_closed", key)
        return Prepared(None, "store_closed"), None

    def _close_store(self, detector: Detector, books: CrawlBooks) -> None:
        """Store thread, at close (the workers are stopped): the URL rules' last counts and the crawl's
        ``books``, then flush and close the store."""
        with self._store_lock:
            rules, self.rules = self.rules, None
            if rules is not None:
                try:
                    rules.sync()
                    book = rules.book
                    confident = sum(len(book.confident(host)) for host in list(book.counts))
                    self.stats.set_value("neardup/url_rules/confident", confident)
                except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                    logger.warning("scrapy-neardup: the URL rules' last counts were not saved: %s", exc)
            if self.templates is not None:
                try:
                    self.templates.close(detector.store)
                except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                    logger.warning("scrapy-neardup: the learned templates were not saved: %s", exc)
            try:
                detector.store.add_crawl_books(books)
            except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                logger.warning("scrapy-neardup: this crawl's books were not saved in the store: %s", exc)
            detector.close()

    def _close_spider(self, reason: str) -> None:
        engine = self.crawler.engine
        if engine is None:  # pragma: no cover - the crawl is already over
            return
        if hasattr(engine, "close_spider_async"):
            deferred_from_coro(engine.close_spider_async(reason=reason))
        else:  # pragma: no cover - Scrapy < 2.14
            engine.close_spider(self.crawler.spider, reason)  # type: ignore[arg-type]

    def store_failed(self, key: str, exc: Exception) -> None:
        """Count a page the store failed on (it passes on unchecked) and follow ``NEARDUP_ON_STORE_ERROR``.
        A failed write may also have lost pages filed before it since the last commit: they are counted in
        ``neardup/unsaved`` and named in the log line."""
        self.stats.inc_value("neardup/store_error")
        unsaved = exc.unsaved if isinstance(exc, StoreWriteError) else 0
        if unsaved:
            self.stats.inc_value("neardup/unsaved", unsaved)
            logger.error(
                "scrapy-neardup: the fingerprints of %d pages filed since the store's last commit "
                "were lost with a failed write (counted in neardup/unsaved): %s",
                unsaved,
                exc,
            )
        if self.config.on_store_error == "stop":
            logger.error(
                "scrapy-neardup: store error on %s; stopping the crawl (NEARDUP_ON_STORE_ERROR = 'stop'): %s", key, exc
            )
            if not self._stopping:
                self._stopping = True
                self._close_spider("neardup_store_error")
        else:
            logger.warning(
                "scrapy-neardup: store error on %s; passed on unchecked (NEARDUP_ON_STORE_ERROR = 'pass'): %s", key, exc
            )
