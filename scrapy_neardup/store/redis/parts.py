"""The parts of a Redis store beside the fingerprints (:mod:`scrapy_neardup.store.parts`), each under keys of
the store's own, ``P:name``, written so that processes sharing the store never read before they write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..books import KEPT_CRAWLS, CrawlBooks
from ..parts import (
    STALE_SECS,
    BookShelf,
    GroupBudgets,
    RuleCount,
    RuleName,
    RunningCrawl,
    SelectorRecords,
    UrlRuleCounts,
    read_books,
)
from .scripts import ADD_RULE_COUNTS, ADMIT, JOIN_CRAWL, SAVE_SELECTORS

if TYPE_CHECKING:
    from .client import RedisConnection


def _changed_since(connection: RedisConnection, changed: str, mark: int | None) -> tuple[list[bytes] | None, int]:
    """The members of ``changed`` (a sorted set, each member scored by the number of the write that changed it
    last) written after ``mark``, and the last number; ``None`` for the members when everything is to be read:
    the first read (no mark), or numbers begun again (the store cleared since)."""
    top = connection.call(connection.client.zrevrange, changed, 0, 0, withscores=True)
    last = int(top[0][1]) if top else 0
    if mark is None or last < mark:
        return None, last
    if last == mark:
        return [], mark
    members = connection.call(connection.client.zrangebyscore, changed, f"({mark}", last, withscores=True)
    return [name for name, _ in members], last


class RedisRuleCounts(UrlRuleCounts):
    """One hash, ``P:urlrules``: a field ``host<TAB>rule<TAB>+`` (successes) and ``...-`` (failures) a rule,
    added to with HINCRBY, so that processes add their counts without reading them first; and a sorted set,
    ``P:urlrules_changed``: each rule scored by the number of the add that changed it last (adds numbered by
    the script that makes them: :data:`.scripts.ADD_RULE_COUNTS`), which is what a process reads what the
    others counted from (:meth:`read_changed`)."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    def add(self, counts: Mapping[RuleName, RuleCount]) -> None:
        if not counts:
            return
        connection = self.connection
        keys = (connection.key_of("urlrules"), connection.key_of("urlrules_changed"))
        values = [
            part
            for (host, rule), (successes, failures) in counts.items()
            for part in (f"{host}\t{rule}", successes, failures)
        ]
        connection.call(connection.client.eval, ADD_RULE_COUNTS, 2, *keys, *values)

    def read(self) -> dict[RuleName, RuleCount]:
        connection = self.connection
        raw = connection.call(connection.client.hgetall, connection.key_of("urlrules"))
        out: dict[RuleName, RuleCount] = {}
        for field, value in raw.items():
            try:
                host, rule, sign = field.decode().split("\t")
                number = int(value)
            except ValueError:  # not a field of ours: passed over
                continue
            successes, failures = out.get((host, rule), (0, 0))
            out[(host, rule)] = (successes + number, failures) if sign == "+" else (successes, failures + number)
        return out

    def read_changed(self, mark: int | None) -> tuple[dict[RuleName, RuleCount], int]:
        connection = self.connection
        names, last = _changed_since(connection, connection.key_of("urlrules_changed"), mark)
        if names is None:
            return self.read(), last  # read after the number: an add between the two is read twice, not missed
        if not names:
            return {}, last
        fields = [field for name in names for field in (name + b"\t+", name + b"\t-")]
        values = connection.call(connection.client.hmget, connection.key_of("urlrules"), fields)
        out: dict[RuleName, RuleCount] = {}
        for name, successes, failures in zip(names, values[0::2], values[1::2]):
            try:
                host, rule = name.decode().split("\t")
                out[(host, rule)] = (int(successes or 0), int(failures or 0))
            except ValueError:  # not a member of ours: passed over
                continue
        return out, last


class RedisBudgets(GroupBudgets):
    """One hash, ``P:budget``: a field per group, its admitted keys one a line, read and extended by one script
    (EVAL: a short body, sent whole, so a server that lost its script cache needs nothing), so that processes
    asking at once never admit more than ``budget``."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    def admit(self, group: str, key: str, budget: int) -> bool:
        connection = self.connection
        admitted = connection.call(connection.client.eval, ADMIT, 1, connection.key_of("budget"), group, key, budget)
        return bool(int(admitted))


class RedisSelectors(SelectorRecords):
    """One hash, ``P:selectors``: a field a template, its selector's JSON; and a sorted set,
    ``P:selectors_changed``: each template scored by the number of the save that changed it last (saves
    numbered by the script that makes them: :data:`.scripts.SAVE_SELECTORS`), which is what a process reads
    what others learned from (:meth:`read_changed`)."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    def save(self, records: Mapping[str, str]) -> None:
        if records:
            connection = self.connection
            values = [part for name, record in records.items() for part in (name, record)]
            keys = (connection.key_of("selectors"), connection.key_of("selectors_changed"))
            connection.call(connection.client.eval, SAVE_SELECTORS, 2, *keys, *values)

    def read(self) -> dict[str, str]:
        connection = self.connection
        raw = connection.call(connection.client.hgetall, connection.key_of("selectors"))
        return {field.decode(): value.decode() for field, value in raw.items()}

    def read_changed(self, mark: int | None) -> tuple[dict[str, str], int]:
        connection = self.connection
        names, last = _changed_since(connection, connection.key_of("selectors_changed"), mark)
        if names is None:
            return self.read(), last  # read after the number: a save between the two is read twice, not missed
        if not names:
            return {}, last
        values = connection.call(connection.client.hmget, connection.key_of("selectors"), names)
        return {n.decode(): v.decode() for n, v in zip(names, values) if v is not None}, last


class RedisBooks(BookShelf):
    """A list, ``P:crawls``: the books pushed at its head, the list cut to the newest kept."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    def add(self, books: CrawlBooks) -> None:
        connection = self.connection
        key = connection.key_of("crawls")

        def push() -> None:
            pipe = connection.client.pipeline(transaction=False)
            pipe.lpush(key, books.to_json())
            pipe.ltrim(key, 0, KEPT_CRAWLS - 1)
            pipe.execute()

        connection.call(push)

    def read(self) -> list[CrawlBooks]:
        connection = self.connection
        return read_books(connection.call(connection.client.lrange, connection.key_of("crawls"), 0, -1))


class RedisRunning(RunningCrawl):
    """One hash, ``P:running``: ``started`` (ms), and a field ``p:<process>`` a process crawling, its last beat
    (ms). A process joins through one script (:data:`.scripts.JOIN_CRAWL`: it drops the processes gone
    stale, then takes the crawl's start or begins a new one), so that processes joining at once agree."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    def join(self, process: str, now: float) -> float:
        connection = self.connection
        key, mine = connection.key_of("running"), int(now * 1000)
        started = connection.call(connection.client.eval, JOIN_CRAWL, 1, key, process, mine, int(STALE_SECS * 1000))
        try:
            started_ms = int(started)
        except (TypeError, ValueError):  # not a number of ours: this process begins the crawl
            return now
        return now if started_ms == mine else started_ms / 1000  # kept in ms: this process's own start, exactly

    def beat(self, process: str, now: float) -> None:
        connection = self.connection
        connection.call(connection.client.hset, connection.key_of("running"), f"p:{process}", int(now * 1000))

    def leave(self, process: str) -> None:
        connection = self.connection
        connection.call(connection.client.hdel, connection.key_of("running"), f"p:{process}")

    def members(self) -> list[str]:
        connection = self.connection
        fields = connection.call(connection.client.hkeys, connection.key_of("running"))
        names = (f.decode("utf-8", "replace") if isinstance(f, bytes) else str(f) for f in fields)
        return [name[2:] for name in names if name.startswith("p:")]
