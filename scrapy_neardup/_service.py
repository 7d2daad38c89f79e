"""The crawler-scoped core that the Scrapy components share: one config, one store, one detector.

The downloader middleware, the spider middleware and the pipeline each call :meth:`NearDupService.for_crawler`
and get the same instance, so a crawler has exactly one store connection. The store is opened on
``spider_opened`` and flushed and closed on ``spider_closed``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.project import data_path
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from ._config import Config
from .engine.detector import Detector, Verdict
from .engine.pipeline import Prepared
from .store import Store, StoreError, StoreMismatchError, store_from_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.spiders import Spider

logger = logging.getLogger("scrapy_neardup")

#: Near-duplicate groups remembered for the end-of-crawl summary (the store keeps them all).
MAX_REPORTED_GROUPS = 10_000
#: Groups written out in the closing log line.
LOGGED_GROUPS = 20

#: Why a document was not checked: the ``neardup/skipped/<reason>`` stats and their log wording.
SKIP_REASONS = {
    "binary": "the body is binary (NUL bytes or a PDF, image or archive signature)",
    "disabled": "neardup_enabled is False in its meta",
    "empty": "the body is empty",
    "error": "fingerprinting failed unexpectedly",
    "item_without_text": "the item has no text in NEARDUP_ITEM_FIELD",
    "no_text": "it has no visible text",
    "not_html": "it is not HTML",
    "not_text": "its body cannot be decoded as text",
    "status": "its HTTP status is not 2xx",
    "store_closed": "the store is not open",
    "too_large": "the body is larger than NEARDUP_MAX_BODY_SIZE",
    "too_little_text": "its text is shorter than NEARDUP_MIN_TEXT_LENGTH",
}

_services: weakref.WeakKeyDictionary[Any, NearDupService] = weakref.WeakKeyDictionary()


def _in_thread(pool: ThreadPool, fn: Any, *args: Any) -> Any:
    """Run ``fn`` on ``pool``; awaitable under both the asyncio and the default reactor."""
    from twisted.internet import reactor  # imported late: importing it at module level installs a reactor

    return maybe_deferred_to_future(deferToThreadPool(reactor, pool, fn, *args))


def _looks_binary(body: bytes) -> bool:
    head = body[:2048]
    if b"\x00" in head:
        return True
    return head.startswith((b"%PDF", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b"))


class NearDupService:
    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.pipeline = config.build_pipeline()
        self.algorithm = self.pipeline.algorithm
        self.detector: Detector | None = None
        self.groups: dict[str, list[str]] = {}
        self._logged_first_duplicate = False
        self._logged_skip_reasons: set[str] = set()
        self._pool: ThreadPool | None = None
        self._pool_size = max(1, crawler.settings.getint("REACTOR_THREADPOOL_MAXSIZE", 10))
        self._store_lock = threading.Lock()
        self._stopping = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> NearDupService:
        """The crawler's service, built on first use; ``NotConfigured`` when ``NEARDUP_ENABLED`` is false."""
        service = _services.get(crawler)
        if service is None:
            config = Config.from_settings(crawler.settings)
            if not config.enabled:
                raise NotConfigured("scrapy-neardup is disabled: set NEARDUP_ENABLED = True to enable it")
            service = cls(crawler, config)
            _services[crawler] = service
        return service

    # -- lifecycle ---------------------------------------------------------------------------------
    def spider_opened(self, spider: Spider) -> None:
        config = self.config
        url = config.resolve_store_url(spider.name, data_path("", createdir=False))
        store: Store = store_from_url(
            url,
            commit_every=config.store_commit_every,
            commit_secs=config.store_commit_secs,
            prefix=config.redis_key % {"spider": spider.name},
            retries=config.redis_retries,
            timeout_secs=config.redis_timeout_secs,
        )
        detector = Detector(self.algorithm, store)
        try:
            detector.open(reset=self.config.reset)
        except StoreError as exc:
            # Fingerprints that cannot be compared, or no store at all: crawling on would let every
            # near-duplicate through unnoticed, so the crawl stops with the reason in the log.
            reason = "neardup_store_mismatch" if isinstance(exc, StoreMismatchError) else "neardup_store_error"
            logger.error("scrapy-neardup: %s", exc, extra={"spider": spider})
            raise CloseSpider(reason) from exc
        self.detector = detector
        self._pool = ThreadPool(0, self._pool_size, name="scrapy-neardup")
        self._pool.start()
        initial = store.count()
        self.stats.set_value("neardup/initial", initial)
        logger.info(
            "scrapy-neardup: store %s, %s, threshold %.3g, action %s, %d fingerprints already stored",
            store.location,
            ", ".join(f"{k}={v}" for k, v in self.algorithm.params().items()),
            self.algorithm.threshold,
            self.config.action,
            initial,
            extra={"spider": spider},
        )

    async def spider_closed(self, spider: Spider, reason: str = "") -> None:
        if self.detector is None:
            return
        detector, pool = self.detector, self._pool
        self.detector, self._pool = None, None  # pages still in a worker see the store closed
        if pool is not None:
            await _in_thread(pool, self._close_store, detector)
            pool.stop()
        else:
            self._close_store(detector)
        get = self.stats.get_value
        skipped = {k.rsplit("/", 1)[1]: v for k, v in self.stats.get_stats().items() if k.startswith("neardup/skipped/")}
        logger.info(
            "scrapy-neardup: %d pages checked: %d unique, %d near-duplicates (%d dropped), %d seen before; "
            "%d skipped%s",
            get("neardup/checked", 0),
            get("neardup/unique", 0),
            get("neardup/duplicate", 0),
            get("neardup/dropped", 0),
            get("neardup/seen", 0),
            sum(skipped.values()),
            " (" + ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items())) + ")" if skipped else "",
            extra={"spider": spider},
        )
        if self.groups:
            shown = sorted(self.groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:LOGGED_GROUPS]
            lines = [f"  {canonical}\n" + "".join(f"    ~ {dup}\n" for dup in dups) for canonical, dups in shown]
            more = len(self.groups) - len(shown)
            logger.info(
                "scrapy-neardup: %d near-duplicate groups found in this crawl%s:\n%s",
                len(self.groups),
                f" (the {len(shown)} largest shown)" if more > 0 else "",
                "".join(lines).rstrip("\n"),
                extra={"spider": spider},
            )

    # -- the work ----------------------------------------------------------------------------------
    def prepare_response(self, response: Response) -> Prepared:
        """Pick the text of a response and fingerprint it. Pure: safe to run in a worker thread."""
        body = response.body
        if not body or not body.strip():
            return Prepared(None, "empty")
        if len(body) > self.config.max_body_size:
            return Prepared(None, "too_large")
        if _looks_binary(body):
            return Prepared(None, "binary")
        try:
            html = response.text  # type: ignore[attr-defined]
        except (AttributeError, UnicodeError, LookupError):
            return Prepared(None, "not_text")
        return self.pipeline.from_html(html, response.url)


    async def check(self, key: str, prepare: Callable[[], Prepared]) -> tuple[Prepared, Verdict | None]:
        """Prepare a document (extract and fingerprint it) and file it, in one trip to a worker thread.

        Returns what was prepared and the verdict, or ``None`` when the document was skipped or the store
        failed (both counted and logged here). One hop to the service's thread pool and back, not one for
        the fingerprint and another for the store: each hop costs a wake-up of the reactor. The store sees
        one caller at a time (a lock); the pool is the service's own, so slow pages or a store that is
        retrying never take the reactor's threads, which Scrapy's DNS resolver needs.
        """
        pool = self._pool
        if pool is None:
            self.skip("store_closed", key)
            return Prepared(None, "store_closed"), None
        prepared, outcome = await _in_thread(pool, self._prepare_and_file, key, prepare)
        if prepared.method == "page":
            self.stats.inc_value("neardup/extract/page_text_fallback")
        elif prepared.method == "template":
            self.stats.inc_value("neardup/extract/template")
            logger.debug("scrapy-neardup: %s extracted to its host's template text; fingerprinted on the page text",
                         key, extra={"spider": self.crawler.spider})
        if isinstance(outcome, Verdict):
            self.record(key, outcome)
            return prepared, outcome
        if isinstance(outcome, StoreError):
            self.store_failed(key, outcome)
        else:
            self.skip(prepared.skip_reason or "store_closed", key)
        return prepared, None

    def _prepare_and_file(
        self, key: str, prepare: Callable[[], Prepared]
    ) -> tuple[Prepared, Verdict | StoreError | None]:
        """Worker thread: the whole of :meth:`check` that does not touch Scrapy."""
        try:
            prepared = prepare()
        except Exception:  # a page must never crash the crawl
            self.logger_exception(key)
            return Prepared(None, "error"), None
        fp = prepared.fingerprint
        if fp is None:
            return prepared, None
        with self._store_lock:
            detector = self.detector
            if detector is None:
                return Prepared(None, "store_closed", method=prepared.method), None
            try:
                return prepared, detector.check_fingerprint(key, fp.signature, fp.buckets)
            except StoreError as exc:
                return prepared, exc

    def _close_store(self, detector: Detector) -> None:
        with self._store_lock:
            detector.close()

    def store_failed(self, key: str, exc: Exception) -> None:
        self.stats.inc_value("neardup/store_error")
        if self.config.on_store_error == "stop":
            logger.error("scrapy-neardup: store error on %s; stopping the crawl (NEARDUP_ON_STORE_ERROR = 'stop'): %s",
                         key, exc)
            if not self._stopping:
                self._stopping = True
                engine = self.crawler.engine
                if hasattr(engine, "close_spider_async"):
                    deferred_from_coro(engine.close_spider_async(reason="neardup_store_error"))
                else:  # pragma: no cover - Scrapy < 2.14
                    engine.close_spider(self.crawler.spider, "neardup_store_error")
        else:
            logger.warning("scrapy-neardup: store error on %s; passed on unchecked (NEARDUP_ON_STORE_ERROR = 'pass'): %s",
                           key, exc)

    def record(self, key: str, verdict: Verdict) -> None:
        """Stats, log lines and the crawl's group report for a verdict (reactor thread)."""
        self.stats.inc_value("neardup/checked")
        self.stats.inc_value(f"neardup/{verdict.status}")
        if verdict.status == "duplicate":
            group = self.groups.get(verdict.canonical)
            if group is not None:
                group.append(key)
            elif len(self.groups) < MAX_REPORTED_GROUPS:
                self.groups[verdict.canonical] = [key]
            if self.config.debug or not self._logged_first_duplicate:
                logger.log(
                    logging.INFO if not self._logged_first_duplicate else logging.DEBUG,
                    "scrapy-neardup: %s is a near-duplicate of %s (similarity %.3f)%s",
                    key,
                    verdict.canonical,
                    verdict.similarity,
                    "" if self.config.debug else " - no further duplicates will be shown (see NEARDUP_DEBUG)",
                )
                self._logged_first_duplicate = True

    def logger_exception(self, url: str) -> None:
        logger.warning("scrapy-neardup: could not fingerprint %s; passed on unchecked", url, exc_info=True)

    def skip(self, reason: str, url: str = "") -> None:
        """Count a document that is passed on unchecked; say so once per reason at INFO, then at DEBUG."""
        self.stats.inc_value(f"neardup/skipped/{reason}")
        first = reason not in self._logged_skip_reasons
        if first or self.config.debug:
            self._logged_skip_reasons.add(reason)
            logger.log(
                logging.INFO if first else logging.DEBUG,
                "scrapy-neardup: %s passed on unchecked: %s%s",
                url or "a document",
                SKIP_REASONS.get(reason, reason),
                f" (such documents are counted in neardup/skipped/{reason})" if first else "",
            )


def verdict_meta(verdict: Verdict) -> dict[str, Any]:
    """The ``neardup`` meta value describing a verdict."""
    return {
        "status": verdict.status,
        "canonical": verdict.canonical,
        "similarity": round(verdict.similarity, 6),
        "duplicate": verdict.is_duplicate,
    }
