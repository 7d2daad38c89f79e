"""What the crawl is told: the ``neardup/*`` stats, the log lines (the first of each kind at INFO, the rest at
DEBUG with ``NEARDUP_DEBUG``), the closing summary with the crawl's largest near-duplicate groups, and the
verdict written to a request's meta."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..engine.urlrules import host_of
from ..engine.urlshape import url_shape
from ..store.books import NAMED_PREDICTED, NAMED_SOFT404, CrawlBooks, PredictedPage, Soft404Page

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

    from ..engine.detector import Verdict

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
    "no_words": "its text has no words (only symbols, punctuation, emoji or invisible characters)",
    "not_html": "it is not HTML",
    "status": "its HTTP status is not 2xx",
    "store_closed": "the store is not open",
    "timeout": "its extraction took longer than NEARDUP_WORKER_TIMEOUT",
    "worker_lost": "the worker process extracting it died",
    "too_large": "the body is larger than NEARDUP_MAX_BODY_SIZE",
    "too_little_text": "its text is shorter than NEARDUP_MIN_TEXT_LENGTH",
}

#: Why a page filed before was checked afresh: the ``neardup/rechecked/<reason>`` stats and their log wording.
RECHECK_REASONS = {
    "changed": "its content changed beyond the threshold (NEARDUP_RECHECK_CHANGED)",
    "expired": "it was last fetched longer ago than NEARDUP_EXPIRATION_SECS",
    "orphaned": "the page it was a near-duplicate of was removed from the store",
}


class Reporter:
    """Counts and says what became of each document; one per crawler, called in the reactor thread."""

    def __init__(self, crawler: Crawler, debug: bool) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.debug = debug
        self.groups: dict[str, list[str]] = {}
        self._logged_first_duplicate = False
        self._logged_first_seen = False
        self._logged_skip_reasons: set[str] = set()
        self._logged_rechecks: set[str] = set()
        #: The crawl's books (:meth:`books`): per host, soft-404 pages and requests the URL rules left
        #: unfetched; the soft-404 pages named; the bytes and responses each host answered, by URL shape and in
        #: all (the size of an avoided fetch is estimated by the mean of its shape); the CPU the plugin spent.
        self._hosts: dict[str, Counter[str]] = {}
        self._soft404_pages: list[Soft404Page] = []
        self._predicted_pages: list[PredictedPage] = []
        self._host_bytes: dict[tuple[str, str | None], list[int]] = {}
        self._bytes_avoided = 0.0
        self.cpu_seconds = 0.0

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the ``neardup/...`` stat ``name``: every counter of the plugin is written here."""
        self.stats.inc_value(name, n)

    def set(self, name: str, value: Any) -> None:
        """Set the ``neardup/...`` stat ``name``."""
        self.stats.set_value(name, value)

    def most(self, name: str, value: int) -> None:
        """Keep the largest ``value`` seen in the ``neardup/...`` stat ``name``."""
        self.stats.max_value(name, value)

    def record(self, key: str, verdict: Verdict, group: str | None = None) -> None:
        """Stats, log lines and the crawl's group report for a verdict (reactor thread); ``group``: the name
        its group goes by in this crawl (:class:`~.groups.GroupNames`; its canonical page when not given)."""
        self.stats.inc_value("neardup/checked")
        self.stats.inc_value(f"neardup/{verdict.status}")
        if verdict.rechecked is not None:
            self.stats.inc_value(f"neardup/rechecked/{verdict.rechecked}")
            first = verdict.rechecked not in self._logged_rechecks
            if first or self.debug:
                self._logged_rechecks.add(verdict.rechecked)
                logger.log(
                    logging.INFO if first else logging.DEBUG,
                    "scrapy-neardup: %s was filed before, but %s: checked afresh, now %s%s",
                    key,
                    RECHECK_REASONS[verdict.rechecked],
                    verdict.status,
                    f" (such pages are counted in neardup/rechecked/{verdict.rechecked})" if first else "",
                )
        if verdict.status == "soft404":
            self._hosts.setdefault(host_of(key), Counter())["soft404"] += 1
            if len(self._soft404_pages) < NAMED_SOFT404:
                self._soft404_pages.append(Soft404Page(key, verdict.canonical, round(verdict.similarity, 6)))
            self.log_once(
                "soft404",
                f"{key} is a soft-404 page: a near-duplicate (similarity {verdict.similarity:.3f}) of what its "
                f"host answers for {verdict.canonical}, a URL that cannot exist (such pages are counted in "
                "neardup/soft404; see NEARDUP_SOFT404)",
            )
        elif verdict.status == "duplicate":
            name = group or verdict.canonical
            members = self.groups.get(name)
            if members is not None:
                members.append(key)
            elif len(self.groups) < MAX_REPORTED_GROUPS:
                self.groups[name] = [key]
            if self.debug or not self._logged_first_duplicate:
                logger.log(
                    logging.INFO if not self._logged_first_duplicate else logging.DEBUG,
                    "scrapy-neardup: %s is a near-duplicate of %s (similarity %.3f)%s",
                    key,
                    verdict.canonical,
                    verdict.similarity,
                    "" if self.debug else " - no further duplicates will be shown (see NEARDUP_DEBUG)",
                )
                self._logged_first_duplicate = True
        elif verdict.status == "seen" and (self.debug or not self._logged_first_seen):
            logger.log(
                logging.INFO if not self._logged_first_seen else logging.DEBUG,
                "scrapy-neardup: %s was filed before (%s)%s",
                key,
                "canonical" if verdict.canonical == key else f"a near-duplicate of {verdict.canonical}",
                "" if self.debug else " - further pages seen before are counted in neardup/seen (see NEARDUP_DEBUG)",
            )
            self._logged_first_seen = True

    def log_once(self, topic: str, message: str) -> None:
        """``message`` at INFO the first time ``topic`` comes up in this crawl, then at DEBUG."""
        first = topic not in self._logged_skip_reasons
        if first or self.debug:
            self._logged_skip_reasons.add(topic)
            logger.log(
                logging.INFO if first else logging.DEBUG,
                "scrapy-neardup: %s",
                message,
                extra={"spider": self.crawler.spider},
            )

    def skip(self, reason: str, url: str = "", log: bool = True) -> None:
        """Count a document that is passed on unchecked; say so once per reason at INFO, then at DEBUG
        (``log=False``: the caller has logged it)."""
        self.stats.inc_value(f"neardup/skipped/{reason}")
        if not log:
            return
        first = reason not in self._logged_skip_reasons
        if first or self.debug:
            self._logged_skip_reasons.add(reason)
            logger.log(
                logging.INFO if first else logging.DEBUG,
                "scrapy-neardup: %s passed on unchecked: %s%s",
                url or "a document",
                SKIP_REASONS.get(reason, reason),
                f" (such documents are counted in neardup/skipped/{reason})" if first else "",
            )

    def fetched(self, url: str, size: int) -> None:
        """A response the crawl downloaded (``neardup/books/fetches`` and ``fetched_bytes``: what the servers
        answered, a response handed over again not counted twice), and its size for the estimate of what an
        avoided fetch of the same shape would have cost."""
        self.stats.inc_value("neardup/books/fetches")
        self.stats.inc_value("neardup/books/fetched_bytes", size)
        host = host_of(url)
        for shape in ((host, url_shape(url)), (host, None)):
            sizes = self._host_bytes.setdefault(shape, [0, 0])
            sizes[0] += size
            sizes[1] += 1

    def avoided(self, url: str, becomes: str, group: str, rules: tuple[str, ...]) -> None:
        """A request the URL rules left unfetched: skipped, or replaced by a request for its group's page
        (which the dupefilter drops when that page was requested already, and which stands in for that
        page's own request otherwise: one fetch fewer either way)."""
        if len(self._predicted_pages) < NAMED_PREDICTED:
            self._predicted_pages.append(PredictedPage(url, becomes, group, rules))
        host = host_of(url)
        self._hosts.setdefault(host, Counter())["avoided"] += 1
        # Its size as the host's responses of its shape (an AMP or print page, a tracking copy) had it, or as
        # the host's responses had it when none of its shape was fetched.
        sizes = self._host_bytes.get((host, url_shape(url))) or self._host_bytes.get((host, None))
        if sizes and sizes[1]:
            self._bytes_avoided += sizes[0] / sizes[1]
        self.stats.inc_value("neardup/books/fetches_avoided")

    def predicted(self, url: str, target: str, group: str, rules: tuple[str, ...]) -> None:
        """A request not fetched: its URL rules make it a URL decided before (said once at INFO)."""
        self.avoided(url, target, group, rules)
        self.log_once(
            "predicted",
            f"{url} not fetched: the URL rules {', '.join(rules)} of its host make it {target}, met before "
            "(such requests are counted in neardup/skipped/predicted; see NEARDUP_URL_RULES)",
        )

    def books(self, started: float, process: str) -> CrawlBooks:
        """This crawl's books, from its stats and what it counted; also set as the ``neardup/books/*`` stats."""
        get = self.stats.get_value
        books = CrawlBooks(
            started,
            time.time(),
            process,
            checked=get("neardup/checked", 0),
            unique=get("neardup/unique", 0),
            duplicates=get("neardup/duplicate", 0),
            seen=get("neardup/seen", 0),
            soft404=get("neardup/soft404", 0),
            dropped=get("neardup/dropped", 0),
            fetches=get("neardup/books/fetches", 0),
            fetched_bytes=get("neardup/books/fetched_bytes", 0),
            fetches_avoided=get("neardup/books/fetches_avoided", 0),
            bytes_avoided=int(self._bytes_avoided),
            cpu_seconds=round(self.cpu_seconds, 3),
            soft404_hosts=get("neardup/soft404/hosts", 0),
            hosts={host: dict(counts) for host, counts in sorted(self._hosts.items())},
            soft404_pages=tuple(self._soft404_pages),
            predicted_pages=tuple(self._predicted_pages),
        )
        self.stats.set_value("neardup/books/bytes_avoided", books.bytes_avoided)
        self.stats.set_value("neardup/books/cpu_seconds", books.cpu_seconds)
        return books

    def log_summary(self, spider: Spider) -> None:
        get = self.stats.get_value
        skipped = {
            k.rsplit("/", 1)[1]: v for k, v in self.stats.get_stats().items() if k.startswith("neardup/skipped/")
        }
        logger.info(
            "scrapy-neardup: %d pages checked: %d unique, %d near-duplicates (%d dropped), %d seen before, "
            "%d soft-404; %d skipped%s",
            get("neardup/checked", 0),
            get("neardup/unique", 0),
            get("neardup/duplicate", 0),
            get("neardup/dropped", 0),
            get("neardup/seen", 0),
            get("neardup/soft404", 0),
            sum(skipped.values()),
            " (" + ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items())) + ")" if skipped else "",
            extra={"spider": spider},
        )
        avoided = get("neardup/books/fetches_avoided", 0)
        fetches = get("neardup/books/fetches", 0)
        cpu = self.cpu_seconds
        logger.info(
            "scrapy-neardup: the books of this crawl: %d responses fetched (%.1f MB), %d pages dropped, %d fetches "
            "avoided (~%.1f MB, %s of what it would have fetched), %.1f s of CPU spent by the plugin "
            "(%.1f ms a page checked)",
            fetches,
            get("neardup/books/fetched_bytes", 0) / 1e6,
            get("neardup/dropped", 0),
            avoided,
            self._bytes_avoided / 1e6,
            f"{avoided / (avoided + fetches):.1%}" if avoided + fetches else "0%",
            cpu,
            1000 * cpu / max(1, get("neardup/checked", 0) + sum(skipped.values())),
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


def verdict_meta(verdict: Verdict, group: str | None = None) -> dict[str, Any]:
    """The ``neardup`` meta value describing a verdict, with the name its group goes by in this crawl
    (``group``; the verdict's canonical page when not given)."""
    return {
        "status": verdict.status,
        "key": verdict.key,
        "canonical": verdict.canonical,
        "group": group or (verdict.canonical if verdict.is_duplicate or verdict.status == "soft404" else verdict.key),
        "similarity": round(verdict.similarity, 6),
        "duplicate": verdict.is_duplicate,
        "rechecked": verdict.rechecked,
    }
