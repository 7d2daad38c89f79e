"""What a crawl meets before its first page: the Scrapy versions' ways of failing a start-up, one line, not a
traceback, for a start-up that fails, and the pages the store forgets when it opens."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import Store

logger = logging.getLogger("scrapy_neardup")


def _scrapy_version() -> tuple[int, ...]:
    import scrapy

    return tuple(int(part) for part in scrapy.__version__.split(".")[:2] if part.isdigit())


#: Scrapy closes the spider when a ``spider_opened`` handler raises ``CloseSpider`` from 2.18 on; before,
#: it logs the exception and crawls on.
CLOSE_FROM_OPENED = _scrapy_version() >= (2, 18)
#: From 2.15 on, a component that raises while Scrapy builds it fails the crawl's start-up with exit status 1
#: (scrapy/scrapy#7255); before, the process exits 0 with a traceback, so there the crawl is stopped when
#: the spider opens instead, with the finish reason.
FAILS_START_UP = _scrapy_version() >= (2, 15)


def process_name() -> str:
    """This crawl process, as its books name it: host and pid."""
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


class ReportedOnce(logging.Filter):
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


def expire(store: Store, seconds: float) -> int:
    """At open, with ``NEARDUP_EXPIRATION_SECS``: forget the pages not fetched for ``seconds``; how many. What the
    removals leave in the index is purged when they were at least a twentieth of the store (a pass
    over the whole index; below that, stale entries cost a skipped candidate now and then)."""
    started = time.monotonic()
    held = store.count()
    expired = store.expire(time.time() - seconds)
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
        seconds,
        purged,
        time.monotonic() - started,
    )
    return expired
