"""What ``dedup`` writes of a verdict: its pair line and its edges for the clusters, one rule for both engines
(the local run and :mod:`~scrapy_neardup.offline.spark`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..engine.detector import Verdict


@dataclass(frozen=True)
class Pair:
    """A near-duplicate and the page of its group, with their similarity: one line of the pairs TSV."""

    near: str
    page: str
    similarity: float


def pair_of(verdict: Verdict, only_new: bool = False) -> Pair | None:
    """The pair a verdict adds to the output, if any. A document known from an earlier run is *seen*; its pair
    comes from the store, so that a rerun over the same input writes the same pairs (``only_new``: the pairs
    of documents new in this run only). A better copy that took its group makes the group's former page its
    near-duplicate."""
    if verdict.displaced is not None:
        return Pair(verdict.displaced, verdict.key, verdict.similarity)
    if verdict.status == "duplicate" or (verdict.is_duplicate and not only_new):
        return Pair(verdict.key, verdict.canonical, verdict.similarity)
    return None


def cluster_edges(verdict: Verdict, pair: Pair, cluster_mode: str) -> list[tuple[str, str]]:
    """The ``(duplicate, canonical)`` edges a pair gives :func:`~scrapy_neardup.engine.cluster.clusters`: in
    ``components`` mode also the other groups the document matched."""
    edges = [(pair.near, pair.page)]
    if cluster_mode == "components":
        edges.extend((verdict.key, other) for other in verdict.also)
    return edges


class FinalGroups:
    """The group pages a run re-pointed, so that what it writes describes its final groups: a pair written
    before a better copy took its group names that copy, as a rerun over the store (which reads the groups
    as they ended) names it. Holds one entry per re-pointed group, not one per document."""

    def __init__(self) -> None:
        self._moved: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._moved)

    def note(self, verdict: Verdict) -> None:
        """A verdict's re-pointing, if it made one: its group's former page now has ``verdict.key`` for page."""
        if verdict.displaced is not None and verdict.displaced != verdict.key:
            self._moved[verdict.displaced] = verdict.key

    def page_of(self, page: str) -> str:
        """The page that ``page``'s group has at the end of the run (``page`` itself unless re-pointed)."""
        seen = {page}
        while page in self._moved:
            page = self._moved[page]
            if page in seen:  # never made by a strict order; a guard all the same
                break
            seen.add(page)
        return page

    def final(self, pair: Pair) -> Pair:
        """``pair`` with its group's final page."""
        page = self.page_of(pair.page)
        return pair if page == pair.page or page == pair.near else Pair(pair.near, page, pair.similarity)


#: Where a verdict's record stands in a run (an index, or a sort key): a written pair takes its record's.
Slot = TypeVar("Slot")


def verdict_record(verdict: Verdict, only_new: bool = False, cluster_mode: str = "strict") -> list[Any]:
    """What a run keeps of a verdict until it ends, as plain JSON values: ``["page", key]`` for a verdict
    that makes no pair; ``[kind, near, page, similarity, key, also]`` for one that does, ``kind`` being
    ``displaced`` when a better copy took its group (the pair names the group's former page), else ``pair``;
    ``also``: the other groups it matched, for connected components."""
    pair = pair_of(verdict, only_new)
    if pair is None:
        return ["page", verdict.key]
    kind = "displaced" if verdict.displaced is not None else "pair"
    also = list(verdict.also) if cluster_mode == "components" else []
    return [kind, pair.near, pair.page, pair.similarity, verdict.key, also]


def final_pairs(
    records: Callable[[], Iterable[tuple[Slot, list[Any]]]], groups: FinalGroups
) -> Iterator[tuple[Slot, Pair | None, list[tuple[str, str]]]]:
    """What a run writes, from its verdicts' records (``records()``, read once more when a group was
    re-pointed): each written pair with its slot and its edges for the clusters (a pair may be ``None`` where
    only edges are left). Every pair names its group's final page, and a group's former page, displaced by a
    better copy, stands where the run met it (its ``page`` record), as a rerun over the store, which finds it
    a near-duplicate, writes it; where the run did not meet it, where it was displaced."""
    displaced: dict[str, Pair] = {}
    placed: set[str] = set()
    if groups:
        displaced = {r[1]: Pair(r[1], r[2], r[3]) for _, r in records() if r[0] == "displaced"}
        placed = {r[1] for _, r in records() if r[0] == "page" and r[1] in displaced}
    for slot, record in records():
        pair: Pair | None = None
        edges: list[tuple[str, str]] = []
        if record[0] == "page":
            if record[1] in placed:
                pair = groups.final(displaced[record[1]])
        elif record[0] == "pair" or record[1] not in placed:
            pair = groups.final(Pair(record[1], record[2], record[3]))
        if pair is not None:
            edges.append((pair.near, pair.page))
        if record[0] != "page":
            edges += [(record[4], groups.page_of(other)) for other in record[5]]
        if pair is not None or edges:
            yield slot, pair, edges
