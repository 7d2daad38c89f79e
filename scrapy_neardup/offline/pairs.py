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
