"""The parts of a SQLite store beside the fingerprints (:mod:`scrapy_neardup.store.parts`), each a table of
the store's file, written in the file's batches (committed with them) and read by every later crawl."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..books import KEPT_CRAWLS, CrawlBooks
from ..parts import (
    BookShelf,
    ChangeLog,
    GroupBudgets,
    RuleCount,
    RuleName,
    SelectorRecords,
    UrlRuleCounts,
    read_books,
)
from .file import translated, translated_read

if TYPE_CHECKING:
    from .file import SqliteFile


class SqliteRuleCounts(UrlRuleCounts):
    """Table ``url_rules``: a row a rule, its counts added to in place, committed at once; what changed since
    a mark known from the changes made through this object (the file has one process, under its lock)."""

    def __init__(self, file: SqliteFile) -> None:
        self.file = file
        self.log: ChangeLog[RuleName] = ChangeLog()

    @translated
    def add(self, counts: Mapping[RuleName, RuleCount]) -> None:
        self.file.db.executemany(
            "INSERT INTO url_rules (host, rule, successes, failures) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (host, rule) DO UPDATE SET successes = successes + excluded.successes, "
            "failures = failures + excluded.failures",
            [(host, rule, successes, failures) for (host, rule), (successes, failures) in counts.items()],
        )
        self.file.flush()
        self.log.changed(counts)

    @translated_read
    def read(self) -> dict[RuleName, RuleCount]:
        rows = self.file.db.execute("SELECT host, rule, successes, failures FROM url_rules").fetchall()
        return {(host, rule): (successes, failures) for host, rule, successes, failures in rows}

    @translated_read
    def read_changed(self, mark: int | None) -> tuple[dict[RuleName, RuleCount], int]:
        names = None if mark is None else self.log.since(mark)
        if names is None:
            return self.read(), self.log.number
        out: dict[RuleName, RuleCount] = {}
        for host, rule in names:
            row = self.file.db.execute(
                "SELECT successes, failures FROM url_rules WHERE host = ? AND rule = ?", (host, rule)
            ).fetchone()
            if row is not None:
                out[(host, rule)] = (row[0], row[1])
        return out, self.log.number


class SqliteBudgets(GroupBudgets):
    """Table ``budget``: a row a group's admitted key (one process holds the file: no race)."""

    def __init__(self, file: SqliteFile) -> None:
        self.file = file

    @translated
    def admit(self, group: str, key: str, budget: int) -> bool:
        db = self.file.db
        if db.execute("SELECT 1 FROM budget WHERE grp = ? AND key = ?", (group, key)).fetchone():
            return True
        if db.execute("SELECT COUNT(*) FROM budget WHERE grp = ?", (group,)).fetchone()[0] >= budget:
            return False
        db.execute("INSERT INTO budget (grp, key) VALUES (?, ?)", (group, key))
        self.file.batched()
        return True


class SqliteSelectors(SelectorRecords):
    """Table ``selectors``: a row a template, its selector's JSON; what changed since a mark known as the
    URL rules' counts know it."""

    def __init__(self, file: SqliteFile) -> None:
        self.file = file
        self.log: ChangeLog[str] = ChangeLog()

    @translated
    def save(self, records: Mapping[str, str]) -> None:
        self.file.db.executemany(
            "INSERT INTO selectors (name, record) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET record = excluded.record",
            list(records.items()),
        )
        self.file.batched()
        self.log.changed(records)

    @translated_read
    def read(self) -> dict[str, str]:
        return dict(self.file.db.execute("SELECT name, record FROM selectors").fetchall())

    @translated_read
    def read_changed(self, mark: int | None) -> tuple[dict[str, str], int]:
        names = None if mark is None else self.log.since(mark)
        if names is None:
            return self.read(), self.log.number
        out: dict[str, str] = {}
        for name in names:
            row = self.file.db.execute("SELECT record FROM selectors WHERE name = ?", (name,)).fetchone()
            if row is not None:
                out[name] = row[0]
        return out, self.log.number


class SqliteBooks(BookShelf):
    """Table ``crawls``: a row a crawl process's books, the newest kept. Committed with the batch it joins (a
    crawl writes its books just before the store's last commit, whose failure then counts the fingerprints it
    lost)."""

    def __init__(self, file: SqliteFile) -> None:
        self.file = file

    @translated
    def add(self, books: CrawlBooks) -> None:
        db = self.file.db
        db.execute("INSERT INTO crawls (books) VALUES (?)", (books.to_json(),))
        db.execute(f"DELETE FROM crawls WHERE id <= (SELECT MAX(id) FROM crawls) - {KEPT_CRAWLS}")
        self.file.batched()

    @translated_read
    def read(self) -> list[CrawlBooks]:
        return read_books([text for (text,) in self.file.db.execute("SELECT books FROM crawls ORDER BY id")])
