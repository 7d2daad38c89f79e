"""Where a crawl's store calls run: the decisions in the order pages come, the URL rules that learn from them,
and the lookups the downloader middleware makes before and after a page is decided.

A local store (SQLite, memory: well under a millisecond a page) is called right on the reactor; Redis on a
thread of its own, so that a store that is retrying never holds the reactor, nor the reactor's threads,
which Scrapy's DNS resolver needs. Either way every call runs under one lock: the template guard's state,
the rules and the store see one caller at a time, in the order pages are decided.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.python.threadpool import ThreadPool

from ..engine.decisions import Decision, DecisionLoop, Declared
from ..engine.detector import Detector, Verdict
from ..engine.urlrules import Learner, Prediction, UrlRule, host_of
from ..engine.urlshape import url_shape
from ..store import StoreError
from ..store.parts import BEAT_SECS, RunningCrawl
from .members import died
from .reactor import in_thread
from .screening import Skip

if TYPE_CHECKING:
    from ..engine.prepare import Prepared
    from ..engine.template import TemplateGuard
    from ..store.books import CrawlBooks
    from .templates import LearnedTemplates

logger = logging.getLogger("scrapy_neardup")

T = TypeVar("T")

#: Guesses of a copy's article by a prior that brought no page (a 404) on a host, after which the prior is not
#: used there for guessing in this crawl (the rule's counts are not touched: a missing page is no other page).
GUESS_MISSES = 2
#: Hosts whose missed guesses are remembered (the table is emptied beyond it).
MAX_GUESS_HOSTS = 100_000


@dataclass(frozen=True)
class Outcome:
    """What the decision made of a page: what was prepared (the text it was filed on), its verdict or why it
    was not decided (:class:`Skip`: the store failed, or is closing; the page has no text to fingerprint),
    how many earlier pages the template guard re-filed, the decisions made ``before`` it (the declared page
    it brought in), whether it is a page decided ``again`` (brought in earlier by a copy that declared it),
    the CPU time the decision took in the crawler process (for the crawl's books), and whether the page it
    declared canonical was filed when it was decided."""

    prepared: Prepared
    result: Verdict | Skip
    refiled: int = 0
    before: tuple[Decision, ...] = ()
    again: bool = False
    cpu_seconds: float = 0.0
    declared_filed: bool = False


class StoreThread:
    """The crawl's detector, decision loop and URL rules, called in order under one lock (on a thread of its
    own for a remote store). Every lookup answers ``None`` (or ``False``) when the store cannot say: closed,
    or failing; the decision itself meets and counts a failing store."""

    def __init__(self) -> None:
        self.detector: Detector | None = None
        self._decisions: DecisionLoop | None = None
        self.rules: Learner | None = None
        self.templates: LearnedTemplates | None = None
        self._lock = threading.Lock()
        self._thread: ThreadPool | None = None
        self.closing = False
        #: How many URL rules were confident when the store closed (``None``: no rules, or not saved).
        self.confident_rules: int | None = None
        #: Lookups that could not be answered: the store failing, or a fault of the plugin's own.
        self.lookup_failures = 0
        self._faults_logged: set[type] = set()
        #: This process among those crawling on the store (:class:`~scrapy_neardup.store.parts.RunningCrawl`).
        self.member = ""
        self._beats: LoopingCall | None = None
        #: Per host, the priors whose guesses brought no page, and how often (:meth:`guess_failed`).
        self._guess_misses: dict[str, dict[str, int]] = {}

    def open(
        self,
        detector: Detector,
        guard: TemplateGuard | None,
        rules: Learner | None,
        templates: LearnedTemplates | None,
        member: str,
    ) -> None:
        """The store is open: its detector, the template guard, the URL rules and the learned templates; the
        crawl joins the processes crawling on the store as ``member``, and takes when their crawl began as
        its own start (the detector's :attr:`~Detector.session_started`; a new crawl on a store that holds
        pages begins at the next whole second, :meth:`Detector.begin_session`)."""
        self.detector = detector
        self._decisions = DecisionLoop(detector, guard)
        self.rules = rules
        self.templates = templates
        self.member = member
        now = time.time()

        def join(proposed: float) -> float:
            try:
                self._take_off_the_dead(detector.store.running)
                return detector.store.running.join(member, proposed)
            except StoreError as exc:
                logger.warning(
                    "scrapy-neardup: this process could not join the processes crawling on the store (%s): "
                    "pages they fetched before it began count as fetched in an earlier crawl",
                    exc,
                )
                return proposed

        detector.begin_session(join)
        if detector.session_started < now:
            logger.info(
                "scrapy-neardup: joined the crawl running on the store since %s (%.0f s ago): a page any of its "
                "processes fetched since counts as fetched in this crawl",
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(detector.session_started)),
                now - detector.session_started,
            )

    def _take_off_the_dead(self, running: RunningCrawl) -> None:
        """Processes of this machine that died without leaving the roll (killed) are taken off it, so that
        this process does not join the crawl they left behind (:func:`.members.died`)."""
        dead = [name for name in running.members() if name != self.member and died(name)]
        for name in dead:
            running.leave(name)
        if dead:
            logger.info(
                "scrapy-neardup: %d process(es) of this machine died without leaving the crawl on the store "
                "(%s): taken off its roll",
                len(dead),
                ", ".join(dead),
            )

    def start(self) -> None:
        self._thread = ThreadPool(0, 1, name="scrapy-neardup-store")
        self._thread.start()
        self._beats = LoopingCall(self._beat)
        self._beats.start(BEAT_SECS, now=False)

    def _beat(self) -> Deferred[None]:
        """This process is still crawling: a beat on the store. One the store fails is only logged at DEBUG
        (the next comes in :data:`BEAT_SECS`; it is no lookup, and not counted as one)."""
        member = self.member

        def beat(detector: Detector) -> None:
            try:
                detector.store.running.beat(member, time.time())
            except StoreError as exc:
                logger.debug("scrapy-neardup: a beat on the store failed: %s", exc)

        return deferred_from_coro(self._run(beat, None))

    async def _run(self, fn: Callable[[Detector], T], failed: T) -> T:
        """``fn`` of the detector, under the lock, here for a local store or on the store thread; ``failed``
        when the store is closed or ``fn`` raises. A failing store is the decisions' to meet and count (a
        lookup then only logs at DEBUG); any other exception is a fault of the plugin's own, logged with its
        traceback the first time its kind is met. Both count in :attr:`lookup_failures`."""

        def locked() -> T:
            with self._lock:
                if self.closing or detector is None:
                    return failed
                try:
                    return fn(detector)
                except StoreError as exc:
                    self.lookup_failures += 1
                    logger.debug("scrapy-neardup: a store lookup failed: %s", exc)
                    return failed
                except Exception as exc:
                    self.lookup_failures += 1
                    if type(exc) not in self._faults_logged:
                        self._faults_logged.add(type(exc))
                        logger.error(
                            "scrapy-neardup: a store lookup failed (%s: %s); it is answered as if the store "
                            "could not say, and further failures of this kind are only counted "
                            "(neardup/store/lookup_failures)",
                            type(exc).__name__,
                            exc,
                            exc_info=True,
                        )
                    return failed

        thread, detector = self._thread, self.detector
        if thread is None or detector is None or self.closing:
            return failed
        if detector.store.local:
            return locked()
        return await in_thread(thread, locked)

    # -- the decision ----------------------------------------------------------------------------------
    async def decide(self, key: str, url: str | None, prepared: Prepared, declared: Declared | None) -> Outcome:
        """The template decision, the re-filing it may ask for, the declared page's decision, and the
        check-and-insert of ``prepared`` under ``key``; the URL rules learn from what was decided."""
        if prepared.fingerprint is None:
            return Outcome(prepared, Skip(prepared.skip_reason or "no_text"))
        closed = Outcome(prepared, Skip("store_closed"))
        return await self._run(lambda detector: self._decide(detector, key, url, prepared, declared), closed)

    def _decide(
        self, detector: Detector, key: str, url: str | None, prepared: Prepared, declared: Declared | None
    ) -> Outcome:
        # On the reactor (a local store) the call runs through, and its wall time is its CPU time; a thread's
        # CPU clock is a system call, which on a busy machine is where the scheduler takes the core away.
        clock = time.perf_counter if detector.store.local else time.thread_time
        cpu = clock()
        assert self._decisions is not None
        try:
            made = self._decisions.decide(key, url, prepared, declared)
        except StoreError as exc:
            return Outcome(prepared, Skip("store_error", exc))
        except Exception as exc:  # noqa: BLE001 - a backend's untranslated failure is still the store's
            return Outcome(prepared, Skip("store_error", StoreError(f"the store failed: {type(exc).__name__}: {exc}")))
        if self.rules is not None:
            self._observe(made, url)
        if self.templates is not None:
            self.templates.sync(detector.store)
        mine = made[-1]
        return Outcome(
            mine.prepared,
            mine.verdict,
            mine.refiled,
            tuple(d for d in made[:-1] if not d.again),
            mine.again,
            clock() - cpu,
            mine.declared_filed,
        )

    def _observe(self, made: list[Decision], url: str | None) -> None:
        """The URL rules learn from the pages just decided (those filed under their own URL: a page with a
        ``neardup_key`` of its own says nothing of its URL)."""
        rules = self.rules
        assert rules is not None
        try:
            for decision in made:
                if decision.again or (decision is made[-1] and decision.key != url):
                    continue
                verdict = decision.verdict
                rules.observe(decision.key, verdict.status, verdict.canonical, verdict.displaced)
        except Exception as exc:  # noqa: BLE001 - the rules are an economy; a failing store is met by the decisions
            logger.debug("scrapy-neardup: the URL rules could not learn from %s: %s", url, exc)

    # -- the downloader middleware's lookups -------------------------------------------------------------
    async def known(self, *keys: str) -> list[bool] | None:
        """Whether each key is filed (whether a declared page is worth fetching first)."""
        return await self._run(lambda detector: [detector.group_of(k) is not None for k in keys], None)

    async def likely_page(self, url: str) -> tuple[str, tuple[str, ...]] | None:
        """The URL ``url`` is most likely a copy of by its host's confident rules and the priors every site
        shares (:meth:`~scrapy_neardup.engine.urlrules.RuleBook.likely_page`), when that page is not filed
        yet: a page to fetch and decide first, as a declared one. ``None`` without URL rules, or on a store other
        processes may share (Redis): they cannot tell which of them fetches such a page, and the one that
        fetched it for its copy would deliver it beside the one whose spider asked for it."""
        rules = self.rules
        if rules is None:
            return None
        host = host_of(url)
        # No rule of its host (read here as predicted() reads it) and no prior's shape: nothing rewrites it.
        if host not in rules.book.candidates and not rules.book.curated.of(host) and not url_shape(url):
            return None

        def guess(detector: Detector) -> tuple[str, tuple[str, ...]] | None:
            if not detector.store.local:
                return None
            misses = self._guess_misses.get(host, {})
            found = rules.book.likely_page(url, [name for name, n in misses.items() if n >= GUESS_MISSES])
            if found is None or found[0] == url or detector.group_of(found[0]) is not None:
                return None
            return found

        return await self._run(guess, None)

    async def guess_failed(self, url: str, rules: tuple[str, ...], had: bool) -> None:
        """A page guessed by :meth:`likely_page` for the copy at ``url``: when it was ``had`` and the copy is
        not its near-duplicate (another page), a failure of each rule used, on the copy's host, as the rules
        count one; when it brought no page (a 404), a miss of each, and the rules missed
        :data:`GUESS_MISSES` times are not used for guessing on that host in this crawl."""
        learner = self.rules
        if learner is None:
            return

        def failed(detector: Detector) -> None:
            if had:
                for name in rules:
                    learner.book.record(url, UrlRule.parse(name), False)
                return
            if len(self._guess_misses) > MAX_GUESS_HOSTS:
                self._guess_misses.clear()
            misses = self._guess_misses.setdefault(host_of(url), {})
            for name in rules:
                misses[name] = misses.get(name, 0) + 1

        await self._run(failed, None)

    async def fetched_now(self, key: str) -> bool | None:
        """Whether ``key`` was filed or fetched again in this crawl, by any process of it."""
        return await self._run(lambda detector: detector.fetched_now(key), None)

    async def admitted(self, group: str, key: str, budget: int) -> bool:
        """Whether near-duplicate ``key`` is one of the first ``budget`` of its group let through
        (:meth:`Store.admit`; a budget of 0 admits no new one, only those admitted before)."""

        def admit(detector: Detector) -> bool:
            try:
                return detector.store.budgets.admit(group, key, budget)
            except StoreError as exc:
                logger.warning("scrapy-neardup: the group budget of %s could not be read: %s", group, exc)
                return False

        return bool(await self._run(admit, False))

    async def predicted(self, url: str) -> Prediction | None:
        """The URL already decided that ``url`` becomes by its host's confident rules, if any."""
        rules = self.rules
        if rules is None:
            return None
        host = host_of(url)
        # Read on the reactor while a remote store's thread may change it: a set's membership, never iterated.
        if host not in rules.book.candidates and not rules.book.curated.of(host):
            return None

        def look(detector: Detector) -> Prediction | None:
            prediction = rules.predict(url)
            if prediction is not None and prediction.group is not None and prediction.group != url:
                prediction = replace(prediction, group_fetched=detector.fetched_now(prediction.group))
            return prediction

        return await self._run(look, None)

    # -- the end -------------------------------------------------------------------------------------------
    def stop(self) -> ThreadPool | None:
        """No call is taken from now on; the thread, to close the store on."""
        self.closing = True
        if self._beats is not None and self._beats.running:
            self._beats.stop()
        return self._thread

    def close(self, books: CrawlBooks) -> None:
        """At close (no call taken any more, the workers stopped): the URL rules' last counts (then
        :attr:`confident_rules`), the learned templates, the crawl's ``books``; then flush and close the
        store. Raises what closing the store raised."""
        detector = self.detector
        if detector is None:
            return
        with self._lock:
            rules, self.rules = self.rules, None
            if rules is not None:
                try:
                    rules.sync()
                    book = rules.book
                    self.confident_rules = sum(len(book.confident(host)) for host in list(book.counts))
                except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                    logger.warning("scrapy-neardup: the URL rules' last counts were not saved: %s", exc)
            if self.templates is not None:
                try:
                    self.templates.close(detector.store)
                except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                    logger.warning("scrapy-neardup: the learned templates were not saved: %s", exc)
            try:
                detector.store.books.add(books)
            except Exception as exc:  # noqa: BLE001 - the fingerprints must still be saved below
                logger.warning("scrapy-neardup: this crawl's books were not saved in the store: %s", exc)
            try:
                detector.store.running.leave(self.member)
            except Exception as exc:  # noqa: BLE001 - its beats have stopped: it is taken for gone soon
                logger.debug("scrapy-neardup: this process could not leave the crawl on the store: %s", exc)
            detector.close()
