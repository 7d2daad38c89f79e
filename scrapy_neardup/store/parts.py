"""What a store keeps beside the fingerprints, each a typed part with a contract of its own: the URL rules'
counts (:mod:`scrapy_neardup.engine.urlrules`), the groups' budgets (``NEARDUP_GROUP_BUDGET``), the learned
templates' selectors (:mod:`scrapy_neardup.engine.learned`) and the books of each crawl (:mod:`.books`).

Every process of a crawl, and the next crawl, reads what the others wrote, so a backend shared by processes
gives its own parts (SQLite, Redis do); the in-process parts here keep them in one process only (the memory
store, and a backend of one's own that gives none). ``Store.clear`` forgets them with the fingerprints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from .books import KEPT_CRAWLS, CrawlBooks

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

    def read_changed(self, mark: int | None) -> tuple[dict[str, str], int]:
        """The selectors saved by other processes since ``mark`` (every one kept for ``None``), and the mark
        to ask from next time: a crawl reads what the processes sharing its store learned without reading
        every selector again (a broad crawl's store holds tens of thousands). A backend one process has to
        itself (in this process; a file under its lock) has nothing to tell after the first read."""
        if mark is None:
            return self.read(), 0
        return {}, mark


class BookShelf(ABC):
    @abstractmethod
    def add(self, books: CrawlBooks) -> None:
        """Keep what one crawl process did (the newest :data:`~.books.KEPT_CRAWLS`)."""

    @abstractmethod
    def read(self) -> list[CrawlBooks]:
        """The books kept, oldest first (a record that does not read as books is passed over)."""


def read_books(records: list[str] | list[bytes]) -> list[CrawlBooks]:
    """Stored JSON records as books, oldest first by start time."""
    books = [CrawlBooks.from_json(record) for record in records]
    return sorted((b for b in books if b is not None), key=lambda b: (b.started, b.finished))


class InProcessRuleCounts(UrlRuleCounts):
    def __init__(self) -> None:
        self._counts: dict[RuleName, RuleCount] = {}

    def add(self, counts: Mapping[RuleName, RuleCount]) -> None:
        for name, (successes, failures) in counts.items():
            old = self._counts.get(name, (0, 0))
            self._counts[name] = (old[0] + successes, old[1] + failures)

    def read(self) -> dict[RuleName, RuleCount]:
        return dict(self._counts)


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

    def save(self, records: Mapping[str, str]) -> None:
        self._records.update(records)

    def read(self) -> dict[str, str]:
        return dict(self._records)


class InProcessBooks(BookShelf):
    def __init__(self) -> None:
        self._records: list[str] = []

    def add(self, books: CrawlBooks) -> None:
        self._records.append(books.to_json())
        del self._records[:-KEPT_CRAWLS]

    def read(self) -> list[CrawlBooks]:
        return read_books(self._records)
