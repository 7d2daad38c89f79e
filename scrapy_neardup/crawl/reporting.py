"""What the crawl is told: the ``neardup/*`` stats, the log lines (the first of each kind at INFO, the rest at
DEBUG with ``NEARDUP_DEBUG``), the closing summary with the crawl's largest near-duplicate groups, and the
verdict written to a request's meta."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..engine.urlrules import SKIPPED_COUNTER, SOFT404_COUNTER, host_of

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
        #: Per ``(host, counter)``: soft-404 pages and requests left unfetched by the URL rules, added to the
        #: store at close for ``scrapy-neardup report`` (:meth:`take_host_counts`).
        self._host_counts: Counter[tuple[str, str]] = Counter()

    def record(self, key: str, verdict: Verdict) -> None:
        """Stats, log lines and the crawl's group report for a verdict (reactor thread)."""
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
            self._host_counts[(host_of(key), SOFT404_COUNTER)] += 1
            self.log_once(
                "soft404",
                f"{key} is a soft-404 page: a near-duplicate (similarity {verdict.similarity:.3f}) of what its "
                f"host answers for {verdict.canonical}, a URL that cannot exist (such pages are counted in "
                "neardup/soft404; see NEARDUP_SOFT404)",
            )
        elif verdict.status == "duplicate":
            group = self.groups.get(verdict.canonical)
            if group is not None:
                group.append(key)
            elif len(self.groups) < MAX_REPORTED_GROUPS:
                self.groups[verdict.canonical] = [key]
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

    def predicted(self, url: str, target: str, rules: tuple[str, ...]) -> None:
        """A request not fetched: its URL rules make it a URL decided before (said once at INFO)."""
        self._host_counts[(host_of(url), SKIPPED_COUNTER)] += 1
        self.log_once(
            "predicted",
            f"{url} not fetched: the URL rules {', '.join(rules)} of its host make it {target}, met before "
            "(such requests are counted in neardup/skipped/predicted; see NEARDUP_URL_RULES)",
        )

    def take_host_counts(self) -> dict[tuple[str, str], int]:
        """The per-host counts since the last call (for the store), and forget them."""
        counts, self._host_counts = dict(self._host_counts), Counter()
        return counts

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


def verdict_meta(verdict: Verdict) -> dict[str, Any]:
    """The ``neardup`` meta value describing a verdict."""
    return {
        "status": verdict.status,
        "key": verdict.key,
        "canonical": verdict.canonical,
        "similarity": round(verdict.similarity, 6),
        "duplicate": verdict.is_duplicate,
        "rechecked": verdict.rechecked,
    }
