"""The crawl's learned templates (``NEARDUP_LEARN_TEMPLATES``): the learner of :mod:`scrapy_neardup.engine.learned`,
its selectors shared through the store, and its counters.

The reactor asks for a host's selectors before a page goes to a worker (:meth:`LearnedTemplates.offers`) and
tells what the page's extraction found when it comes back (:meth:`LearnedTemplates.observe`); the store
thread saves what changed and takes what other processes learned (:meth:`LearnedTemplates.sync`). One lock
keeps the two threads apart; every call is a few dictionary operations.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from typing import TYPE_CHECKING

from ..engine.learned import LEARNER_VERSION, Offers, Selector, TemplateLearner
from ..engine.urlrules import host_of
from ..store import StoreError

if TYPE_CHECKING:
    from ..engine.prepare import Prepared
    from ..store import Store
    from .reporting import Reporter

logger = logging.getLogger("scrapy_neardup")

#: Hosts whose pickled offers are kept (the oldest made first forgotten).
MAX_PACKED = 1000
#: How often the store's selectors are read again (what other processes learned or retired), in seconds;
#: what this process changed is saved at once when a selector is learned or retired, else this often.
SYNC_SECS = 10.0
#: How often every record of the store is read again, not only those changed since the last read, in seconds.
FULL_READ_SECS = 600.0


class LearnedTemplates:
    """The crawl's :class:`TemplateLearner` behind one lock, its offers pickled once a host, its counters
    (``neardup/learned/...``) and its selectors' trips to and from the store."""

    def __init__(self, learner: TemplateLearner, report: Reporter) -> None:
        self.learner = learner
        self.report = report
        self._lock = threading.Lock()
        self._urgent = False
        self._synced = 0.0
        self._packed: dict[str, tuple[Offers, bytes]] = {}
        #: How far the store's records were read (:meth:`SelectorRecords.read_changed`), and when all were.
        self._mark: int | None = None
        self._read_all: float | None = None
        #: The store's records of another extractor or format, and those that do not read, by name.
        self._foreign: set[str] = set()
        self._unreadable: set[str] = set()

    def offers(self, url: str | None) -> bytes | None:  # None: a page without a host
        """What the page goes to a worker with (:meth:`TemplateLearner.offers`): its host's selectors, the
        pre-keys and templates met on it, pickled once for the pages of its host until they change (not
        once a page: the crawler process is a crawl's narrowest resource)."""
        host = host_of(url) if url else ""
        if not host:
            return None
        with self._lock:
            offers = self.learner.offers(host)
            packed = self._packed.get(host)
            if packed is None or packed[0] is not offers:
                packed = self._packed[host] = (offers, pickle.dumps(offers, protocol=pickle.HIGHEST_PROTOCOL))
                if len(self._packed) > MAX_PACKED:
                    self._packed.pop(next(iter(self._packed)))
            return packed[1]

    def observe(self, url: str | None, prepared: Prepared) -> bool:
        """Take what the page's extraction found; ``False`` when its text was replayed by a selector that
        is no longer active (retired while the page was in a worker), or by a worker's own selector for a
        template retired here: its text is not vouched for, and the page must be extracted again by
        trafilatura."""
        host = host_of(url) if url else ""
        if not host or prepared.reused:
            return True  # a response with the bytes of another: that one taught what they teach
        report = self.report
        with self._lock:
            learner = self.learner
            template = prepared.template or 0
            if prepared.learned == "replayed" and (
                learner.retired(host, template) if prepared.own_selector else not learner.active(host, template)
            ):
                report.count("neardup/learned/stale")
                return False
            # A worker's own selector is the worker's to count and retire: here the page only counts as met.
            learned = "" if prepared.own_selector else prepared.learned
            change = learner.observe(
                host, prepared.template, learned, prepared.lesson, prepared.prekey, prepared.agreement
            )
            if change in ("learned", "retired", "unstable"):
                self._urgent = True
            waiting = learner.waiting(host, template) if change == "unstable" else None
        if prepared.template is not None:
            report.count("neardup/learned/" + (prepared.learned or "trafilatura"))
            if prepared.own_selector:
                report.count("neardup/learned/by_worker")
        elif prepared.prekey is not None:
            report.count("neardup/learned/unparsed")
        if change:
            report.count("neardup/learned/" + change)
            if change in ("retired", "unstable"):
                logger.info(
                    "scrapy-neardup: the learned template %x of %s is %s: a check against trafilatura "
                    "disagreed on %s (agreement %.3f)",
                    prepared.template,
                    host,
                    "retired"
                    if change == "retired"
                    else f"unstable (trafilatura only for its next {waiting} pages, then learned again)",
                    url,
                    prepared.agreement,
                )
            elif change == "relearning":
                logger.info(
                    "scrapy-neardup: the unstable template %x of %s is learned again (from %s on)",
                    prepared.template,
                    host,
                    url,
                )
        return True

    def sync(self, store: Store, force: bool = False) -> None:
        """Store thread: save what changed, read what other processes learned since the last read (every
        ``SYNC_SECS``, at once after a selector was learned or retired, or when ``force``); every record
        again each ``FULL_READ_SECS``, in case a process saved some the changes' numbering does not show (one
        of a former version of the plugin)."""
        now = time.monotonic()
        with self._lock:
            if not (force or self._urgent or now - self._synced >= SYNC_SECS):
                return
            self._urgent = False
            self._synced = now
            changed = self.learner.take_changes()
        full = self._read_all is None or now - self._read_all >= FULL_READ_SECS
        mark = None if full else self._mark
        try:
            if changed:
                store.selectors.save({f"{s.host}\t{s.template:x}": s.to_json() for s in changed})
            stored, self._mark = store.selectors.read_changed(mark)
        except StoreError as exc:  # an economy: the crawl goes on with what this process knows
            logger.warning("scrapy-neardup: the learned templates could not be shared: %s", exc)
            return
        if mark is None:
            self._read_all = now
        self.adopt(stored)

    def adopt(self, stored: dict[str, str]) -> None:
        """Take the store's records ``stored`` (all of them, or those changed since the last read): those of
        another extractor or format are counted as foreign, those that do not read as a selector as
        unreadable (each the most known at once in the store, by name), the rest adopted."""
        records = []
        for name, text in stored.items():
            record = Selector.from_json(text)
            self._foreign.discard(name)
            self._unreadable.discard(name)
            if record is None:  # a record of another version of the learner is foreign, not broken
                kind = self._foreign if Selector.format_of(text) not in (None, LEARNER_VERSION) else self._unreadable
                kind.add(name)
            elif record.extractor != self.learner.extractor:
                self._foreign.add(name)
            else:
                records.append(record)
        with self._lock:
            taken = self.learner.adopt(records)
        if taken:
            self.report.count("neardup/learned/adopted", taken)
        if self._foreign:
            self.report.most("neardup/learned/foreign", len(self._foreign))
        if self._unreadable:
            self.report.most("neardup/learned/unreadable", len(self._unreadable))

    def close(self, store: Store) -> None:
        self.sync(store, force=True)
        with self._lock:
            active = sum(1 for s in self.learner.selectors() if s.usable)
        self.report.set("neardup/learned/selectors", active)
