"""What ``dedup`` writes of a verdict: its pair line and its edges for the clusters, one rule for both engines
(the local run and :mod:`~scrapy_neardup.offline.spark`)."""

from __future__ import annotations

from dataclasses import dataclass

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
