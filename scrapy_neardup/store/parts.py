"""What a store keeps beside the fingerprints, each a typed part with a contract of its own: the URL rules'
counts (:mod:`scrapy_neardup.engine.urlrules`), the groups' budgets (``NEARDUP_GROUP_BUDGET``), the learned
templates' selectors (:mod:`scrapy_neardup.engine.learned`), the books of each crawl (:mod:`.books`) and the
processes crawling on the store now (:class:`RunningCrawl`).

Every process of a crawl, and the next crawl, reads what the others wrote, so a backend shared by processes
gives its own parts (SQLite, Redis do); the in-process parts here keep them in one process only (the memory
store, and a backend of one's own that gives none). ``Store.clear`` forgets them with the fingerprints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from .books import KEPT_CRAWLS, CrawlBooks

K = TypeVar("K")

#: A URL rule of a host, ``(host, rule name)``, and its ``(successes, failures)``.
RuleName = tuple[str, str]
RuleCount = tuple[int, int]


class UrlRuleCounts(ABC):
    @abstractmethod
    def add(self, counts: Mapping[RuleName, RuleCount]) -> None:
        """Add each rule's ``(successes, failures)``: every process adds what it counted (never reading
        first), so that all apply the same rules."""

    @abstractmethod
    def read(self) -> dict[RuleName, RuleCount]:
        """Every rule with its ``(successes, failures)``."""

    @abstractmethod
    def read_changed(self, mark: int | None) -> tuple[dict[RuleName, RuleCount], int]:
        """The rules added to since ``mark`` (by any process, this one's included) with their counts, every
        rule for ``None``; and the mark to ask from next time. A crawl process takes what the others counted
        every few seconds: reading every rule of a broad crawl's hundred thousand hosts each time would
        make each read longer than the last."""


class GroupBudgets(ABC):
    @abstractmethod
    def admit(self, group: str, key: str, budget: int) -> bool:
        """Whether near-duplicate ``key`` is one of the first ``budget`` of group ``group`` let through: a key
        admitted once is admitted on every later call (so every crawl lets the same copies through), and a
        group admits at most ``budget`` keys, whichever processes ask (atomically where they share a store)."""


class SelectorRecords(ABC):
    @abstractmethod
    def save(self, records: Mapping[str, str]) -> None:
        """Keep each template's learned selector, ``name`` (host and template key) -> its JSON, replacing the
        one of that name."""

    @abstractmethod
    def read(self) -> dict[str, str]:
        """Every selector kept, name -> JSON (read by :meth:`~scrapy_neardup.engine.learned.Selector.from_json`,
        which checks each field: store data is never trusted)."""

    @abstractmethod
    def read_changed(self, mark: int | None) -> tuple[dict[str, str], int]:
        """The selectors saved since ``mark`` (by any process, this one's included), every one kept for
        ``None``; and the mark to ask from next time: a crawl reads what the processes sharing its store
        learned without reading every selector again (a broad crawl's store holds tens of thousands)."""


class BookShelf(ABC):
    @abstractmethod
    def add(self, books: CrawlBooks) -> None:
        """Keep what one crawl process did (the newest :data:`~.books.KEPT_CRAWLS`)."""

    @abstractmethod
    def read(self) -> list[CrawlBooks]:
        """The books kept, oldest first (a record that does not read as books is passed over)."""


#: Seconds between two beats of a crawl process on its store (:meth:`RunningCrawl.beat`).
BEAT_SECS = 10.0
#: A crawl process whose last beat is older than this is taken for gone (it died without leaving).
STALE_SECS = 60.0


class RunningCrawl(ABC):
    """The processes crawling on the store now, and when their crawl began: what "fetched in this crawl" is
    measured from (a page last seen since). Processes that crawl on one store at once are one crawl, however
    far apart they start, so that a page one of them fetched before another began counts as fetched for
    both; a crawl ends when its last process leaves (or dies: its beats stop). Times are Unix seconds of the
    processes' clocks, as the records' last-seen times are."""

    @abstractmethod
    def join(self, process: str, now: float) -> float:
        """``process`` crawls on the store from ``now``: when the crawl it joins began (``now`` when no
        process is crawling, or every one left has not beaten for :data:`STALE_SECS`)."""

    @abstractmethod
    def beat(self, process: str, now: float) -> None:
        """``process`` is still crawling (every :data:`BEAT_SECS`)."""

    @abstractmethod
    def leave(self, process: str) -> None:
        """``process`` has ended its crawl (or died: the caller knows it did)."""

    @abstractmethod
    def members(self) -> list[str]:
        """The processes on the roll, stale ones included (a process that died without leaving stays on it
        until a process joins more than :data:`STALE_SECS` after its last beat)."""


#: Records a :class:`ChangeLog` remembers the last change of (the least recently changed forgotten first).
MAX_LOGGED = 1 << 16


class ChangeLog(Generic[K]):
    """Which records a backend that one process has to itself changed since a mark (the in-process parts, a
    SQLite file under its lock): every change numbered, and the last ``MAX_LOGGED`` records changed with the
    number of their last change, in that order, so that a read since a mark costs what changed since, not
    every record. A mark older than what is remembered is answered ``None``: read everything."""

    def __init__(self) -> None:
        self.number = 0
        self._forgotten = 0  # changes numbered up to this one may be forgotten
        self._last: dict[K, int] = {}
        self._numbers: list[int] = []
        self._names: list[K] = []

    def changed(self, names: Iterable[K]) -> None:
        self.number += 1
        for name in names:
            self._last[name] = self.number
            self._numbers.append(self.number)
            self._names.append(name)
        if len(self._names) > 2 * MAX_LOGGED:
            order = sorted(self._last.items(), key=lambda item: item[1])
            if len(order) > MAX_LOGGED:
                self._forgotten = order[-MAX_LOGGED - 1][1]
                order = order[-MAX_LOGGED:]
            self._last = dict(order)
            self._names = [name for name, _ in order]
            self._numbers = [number for _, number in order]

    def since(self, mark: int) -> list[K] | None:
        """The records changed after ``mark``, each once; ``None`` when some may be forgotten."""
        if mark < self._forgotten:
            return None
        start = bisect_right(self._numbers, mark)
        return list(dict.fromkeys(name for name in self._names[start:] if self._last.get(name, 0) > mark))

    def clear(self) -> None:
        self._forgotten = self.number
        self._last.clear()
        self._numbers.clear()
        self._names.clear()


def read_books(records: list[str] | list[bytes]) -> list[CrawlBooks]:
    """Stored JSON records as books, oldest first by start time."""
    books = [CrawlBooks.from_json(record) for record in records]
    return sorted((b for b in books if b is not None), key=lambda b: (b.started, b.finished))


class InProcessRuleCounts(UrlRuleCounts):
    def __init__(self) -> None:
        self._counts: dict[RuleName, RuleCount] = {}
        self._log: ChangeLog[RuleName] = ChangeLog()

    def add(self, counts: Mapping[RuleName, RuleCount]) -> None:
        for name, (successes, failures) in counts.items():
            old = self._counts.get(name, (0, 0))
            self._counts[name] = (old[0] + successes, old[1] + failures)
        self._log.changed(counts)

    def read(self) -> dict[RuleName, RuleCount]:
        return dict(self._counts)

    def read_changed(self, mark: int | None) -> tuple[dict[RuleName, RuleCount], int]:
        names = None if mark is None else self._log.since(mark)
        if names is None:
            return self.read(), self._log.number
        return {name: self._counts[name] for name in names}, self._log.number


class InProcessBudgets(GroupBudgets):
    def __init__(self) -> None:
        self._admitted: dict[str, list[str]] = {}

    def admit(self, group: str, key: str, budget: int) -> bool:
        admitted = self._admitted.setdefault(group, [])
        if key in admitted:
            return True
        if len(admitted) >= budget:
            return False
        admitted.append(key)
        return True


class InProcessSelectors(SelectorRecords):
    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._log: ChangeLog[str] = ChangeLog()

    def save(self, records: Mapping[str, str]) -> None:
        self._records.update(records)
        self._log.changed(records)

    def read(self) -> dict[str, str]:
        return dict(self._records)

    def read_changed(self, mark: int | None) -> tuple[dict[str, str], int]:
        names = None if mark is None else self._log.since(mark)
        if names is None:
            return self.read(), self._log.number
        return {name: self._records[name] for name in names}, self._log.number


class InProcessBooks(BookShelf):
    def __init__(self) -> None:
        self._records: list[str] = []

    def add(self, books: CrawlBooks) -> None:
        self._records.append(books.to_json())
        del self._records[:-KEPT_CRAWLS]

    def read(self) -> list[CrawlBooks]:
        return read_books(self._records)


class InProcessRunning(RunningCrawl):
    def __init__(self) -> None:
        self._beats: dict[str, float] = {}
        self._started: float | None = None

    def join(self, process: str, now: float) -> float:
        self._beats = {name: beat for name, beat in self._beats.items() if beat >= now - STALE_SECS}
        if not self._beats or self._started is None:
            self._started = now
        self._beats[process] = now
        return self._started

    def beat(self, process: str, now: float) -> None:
        self._beats[process] = now

    def leave(self, process: str) -> None:
        self._beats.pop(process, None)

    def members(self) -> list[str]:
        return list(self._beats)
