"""The crawler-scoped core that the Scrapy components share: one config, one store, one extraction.

The downloader middleware, the spider middleware and the pipeline each call :meth:`NearDupService.for_crawler`
and get the same instance, so a crawler has exactly one store connection. The store is opened when
the first component is built (a store that cannot be opened fails the crawl's start-up) and flushed and
closed on ``spider_closed``.

A document goes through three calls, each with a typed answer: :meth:`~NearDupService.prepare` (extracted and
fingerprinted by the :class:`.preparer.Preparer`: a :class:`~scrapy_neardup.engine.prepare.Prepared`, or a
:class:`.screening.Skip`), :meth:`~NearDupService.decide` (the template guard, the declared page and the
check-and-insert on the :class:`.storethread.StoreThread`: an :class:`.storethread.Outcome`) and
:meth:`~NearDupService.settle` (counted and logged: a :class:`~scrapy_neardup.engine.detector.Verdict` or a
:class:`.screening.Skip`). The downloader middleware adds its own collaborators between them (the soft-404
check, the declared page); the item pipeline calls :meth:`~NearDupService.check`, the three in a row.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.project import data_path

from ..assembly import (
    build_pipeline,
    build_rule_book,
    build_store,
    build_template_guard,
    build_template_learner,
    open_detector,
)
from ..engine.decisions import Declared
from ..engine.detector import Detector, Verdict
from ..engine.prepare import Prepared
from ..engine.urlrules import Learner
from ..settings import Config, ConfigError, unknown_settings
from ..store import Store, StoreError, StoreMismatchError, StoreWriteError, redact_url
from .groups import GroupNames
from .members import this_process
from .preparer import Preparer
from .reactor import in_thread
from .reporting import Reporter
from .screening import Job, Skip
from .startup import CLOSE_FROM_OPENED, FAILS_START_UP, ReportedOnce, StoreOpenFailed, expire, process_name
from .storethread import Outcome, StoreThread
from .templates import LearnedTemplates

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

logger = logging.getLogger("scrapy_neardup")

_services: weakref.WeakKeyDictionary[Any, NearDupService] = weakref.WeakKeyDictionary()
#: Crawlers whose misspelt NEARDUP_* names were warned about.
_warned: weakref.WeakSet[Any] = weakref.WeakSet()


class NearDupService:
    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.report = Reporter(crawler, config.debug)
        #: The name each group goes by in this crawl's items (one from its first item on).
        self.names = GroupNames()
        self.workers = config.resolved_workers()
        self._threads = max(1, crawler.settings.getint("REACTOR_THREADPOOL_MAXSIZE", 10))
        self.preparer = self._preparer(config, None)
        self.store_thread = StoreThread()
        #: Why the store could not be opened (a finish reason), once it could not: no response goes through.
        self.refused: str | None = None
        self._initial = 0  # pages in the store when it was opened
        self.started = 0.0  # when this process's crawl began (its books'; the detector's may be earlier)
        self._expired = 0  # pages forgotten at open (NEARDUP_EXPIRATION_SECS)
        self._stopping = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    def _preparer(self, config: Config, templates: LearnedTemplates | None) -> Preparer:
        return Preparer(config, build_pipeline(config), self.workers, self._threads, self.report, templates)

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
                # this one line says it all, and that report is filtered out (see ReportedOnce).
                logger.error("scrapy-neardup: the crawl cannot start: %s", exc)
                ReportedOnce.mark(exc)
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
                    if FAILS_START_UP:  # Scrapy fails the start-up (exit status 1); open_store said why
                        ReportedOnce.mark(exc)
                        raise
                    service.refused = exc.reason  # the spider is closed as it opens (see spider_opened)
            _services[crawler] = service
        return service

    # -- lifecycle ---------------------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """The process ids of the extraction workers running now (diagnostics: a benchmark reads their CPU
        time and memory); empty without worker processes."""
        return self.preparer.pids()

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
            self._expired = expire(store, config.expiration_secs) if config.expiration_secs else 0
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
        learner = build_template_learner(config)
        templates = None if learner is None else LearnedTemplates(learner, self.report)
        if templates is not None:
            templates.sync(store, force=True)
        warning = detector.algorithm.scale_warning()
        if warning:
            logger.warning("scrapy-neardup: %s", warning)
        self.preparer = self._preparer(config, templates)
        guard = build_template_guard(config, detector.algorithm)
        self.started = detector.session_started  # this process's own start, for its books
        member = this_process().name
        self.store_thread.open(detector, guard, self._url_rules(store, detector), templates, member)

    def _url_rules(self, store: Store, detector: Detector) -> Learner | None:
        """The URL rules (``NEARDUP_URL_RULES``), learned and hand-written; ``None`` when they are off, or the
        store cannot read them (the rules are an economy: the crawl goes on without them)."""
        config = self.config
        if config.url_rules == "off":
            return None
        try:
            rules = Learner(build_rule_book(config), store.rules, detector.group_of)
        except StoreError as exc:
            logger.warning("scrapy-neardup: URL rules off for this crawl: %s", exc)
            return None
        curated = rules.book.curated
        if config.url_rules_file:
            logger.info(
                "scrapy-neardup: %d hand-written URL rules of %d domains from %s (NEARDUP_URL_RULES_FILE)",
                sum(len(r) for r in curated.rules.values()),
                len(curated.rules),
                config.url_rules_file,
            )
        for line in curated.left:
            logger.warning("scrapy-neardup: %s; left out", line)
        return rules

    def spider_opened(self, spider: Spider) -> None:
        if self.store_thread.detector is None:
            # The store could not be opened on a Scrapy that does not fail a start-up (said already), or the
            # components were built without a spider (not by ``scrapy crawl``) and it opens now: a failure
            # closes the spider before any response goes through.
            if self.refused is None:
                try:
                    self.open_store(spider.name)
                except StoreOpenFailed as exc:
                    self.refused = exc.reason
            if self.refused is not None:
                if CLOSE_FROM_OPENED:
                    raise CloseSpider(self.refused)
                # Older Scrapy logs a CloseSpider raised here and crawls on: close the spider once it is
                # open, and until then no response goes through (see NearDupDownloaderMiddleware).
                from twisted.internet import reactor

                reactor.callLater(0, self._close_spider, self.refused)  # type: ignore[arg-type]
                return
        detector = self.store_thread.detector
        assert detector is not None
        self.store_thread.start()
        self.preparer.start()
        self.report.set("neardup/initial", self._initial)
        if self._expired:
            self.report.set("neardup/expired", self._expired)
        algorithm = detector.algorithm
        logger.info(
            "scrapy-neardup: store %s, %s, threshold %.3g, action %s, %d fingerprints already stored; extraction in %s",
            detector.store.location,
            ", ".join(f"{k}={v}" for k, v in algorithm.params().items()),
            algorithm.threshold,
            self.config.action,
            self._initial,
            f"{self.workers} worker processes" if self.workers else f"{self._threads} threads of this process",
            extra={"spider": spider},
        )

    async def spider_closed(self, spider: Spider, reason: str = "") -> None:
        detector = self.store_thread.detector
        if detector is None or self.store_thread.closing:
            return
        thread = self.store_thread.stop()  # no decision from now on
        try:
            renewed = self.preparer.close()
            for name, value in (("replaced", renewed.replaced), ("recycled", renewed.recycled)):
                if value:
                    self.report.set(f"neardup/workers/{name}", value)
        except Exception:  # the store must still be flushed and closed below
            logger.exception("scrapy-neardup: stopping the extraction workers failed", extra={"spider": spider})
        books = self.report.books(self.started, process_name())
        try:
            if thread is not None:
                await in_thread(thread, self.store_thread.close, books)
            else:
                self.store_thread.close(books)
        except Exception as exc:  # noqa: BLE001 - the crawl must still end, and say what was lost
            unsaved = exc.unsaved if isinstance(exc, StoreWriteError) else 0
            if unsaved:
                self.report.count("neardup/unsaved", unsaved)
            logger.error(
                "scrapy-neardup: closing the store failed; %s: %s",
                f"the fingerprints of the last {unsaved} pages filed were not saved"
                if unsaved
                else "what it had not yet saved may be lost",
                exc,
                extra={"spider": spider},
            )
        finally:
            if thread is not None:  # whatever the store did at close, no thread of ours may keep the process alive
                thread.stop()
        if self.store_thread.confident_rules is not None:
            self.report.set("neardup/url_rules/confident", self.store_thread.confident_rules)
        if self.store_thread.lookup_failures:
            self.report.set("neardup/store/lookup_failures", self.store_thread.lookup_failures)
        if self.config.soft404:
            self.report.set("neardup/soft404/hosts", self.report.stats.get_value("neardup/soft404/hosts", 0))
        self.report.log_summary(spider)

    # -- the work ----------------------------------------------------------------------------------
    async def check(self, key: str, job: Job | Skip) -> Verdict | Skip:
        """A document prepared, decided and settled under ``key``, with nothing between (an item's text)."""
        prepared = await self.prepare(key, job)
        if isinstance(prepared, Skip):
            return prepared
        return self.settle(key, await self.decide(key, None, prepared, None))

    async def prepare(self, key: str, job: Job | Skip, url: str | None = None) -> Prepared | Skip:
        """A document extracted and fingerprinted (in a worker), nothing decided; a skip is counted. A page
        replayed by a learned selector retired while it was in a worker is extracted again by trafilatura
        alone: its text is not vouched for."""
        if isinstance(job, Skip):
            return self.skipped(key, job)
        prepared = await self.preparer.prepare(job, url)
        templates = self.preparer.templates
        if isinstance(prepared, Prepared) and templates is not None and not templates.observe(url, prepared):
            prepared = await self.preparer.prepare(job, url, relearn=True)
        return self.skipped(key, prepared) if isinstance(prepared, Skip) else prepared

    async def decide(self, key: str, url: str | None, prepared: Prepared, declared: Declared | None) -> Outcome:
        """The decision of a prepared document, in the order documents are decided (:class:`StoreThread`);
        not counted yet (:meth:`settle`)."""
        outcome = await self.store_thread.decide(key, url, prepared, declared)
        self.report.cpu_seconds += outcome.cpu_seconds
        return outcome

    def settle(self, key: str, outcome: Outcome) -> Verdict | Skip:
        """Count and log what became of a page (and of the declared page decided before it)."""
        prepared, result = outcome.prepared, outcome.result
        if prepared.reused:
            self.report.count("neardup/extract/reused")
        if isinstance(result, Skip):
            return self.skipped(key, result)
        if outcome.refiled:
            self.report.count("neardup/extract/refiled", outcome.refiled)
        if prepared.method == "page":
            self.report.count("neardup/extract/page_text_fallback")
        elif prepared.method == "template":
            self.report.count("neardup/extract/template")
            logger.debug(
                "scrapy-neardup: %s extracted to its host's template text; fingerprinted on the page text",
                key,
                extra={"spider": self.crawler.spider},
            )
        for before in outcome.before:  # the declared page, fetched and decided first
            self.report.count("neardup/canonical/fetched_first")
            self.report.record(before.key, before.verdict, self.names.note(before.verdict))
        if not outcome.again:  # else counted when a copy brought it in
            self.report.record(key, result, self.names.note(result))
            if result.displaced is not None:
                self.report.count("neardup/repointed")
        return result

    def skipped(self, key: str, skip: Skip) -> Skip:
        """Count (and log) a document passed on unchecked; a store that failed on it is followed as
        ``NEARDUP_ON_STORE_ERROR`` says (:meth:`store_failed`)."""
        reason, error = skip.reason, skip.error
        if reason == "store_error" and isinstance(error, Exception):
            self.store_failed(key, error)
        elif reason in ("timeout", "worker_lost"):
            logger.warning(
                "scrapy-neardup: %s passed on unchecked: %s (counted in neardup/skipped/%s)",
                key,
                error,
                reason,
                extra={"spider": self.crawler.spider},
            )
            self.report.skip(reason, key, log=False)
        elif reason == "error":
            logger.warning(
                "scrapy-neardup: could not fingerprint %s; passed on unchecked",
                key,
                exc_info=error,
                extra={"spider": self.crawler.spider},
            )
            self.report.skip(reason, key, log=False)
        else:
            self.report.skip(reason, key)
        return skip

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
        self.report.count("neardup/store_error")
        unsaved = exc.unsaved if isinstance(exc, StoreWriteError) else 0
        if unsaved:
            self.report.count("neardup/unsaved", unsaved)
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
