"""Bounded tables: a crawl meets hosts, pages and groups without end, so what it remembers of them is kept in
tables of a fixed size, the least recently met forgotten first."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(table: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """``key`` put last in ``table`` (the most recently met), the oldest forgotten beyond ``limit``."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)
