"""Clusters from near-duplicate pairs.

* ``components``: connected components of the pair graph (Broder et al. 1997, the clustering step of the
  shingling paper, done with union-find). Transitive: A~B and B~C put A and C together even if A≁C.
* ``strict``: every member resembles the cluster's canonical page. Each document joins the cluster of the
  canonical it was judged a near-duplicate of (its best match, which is itself a canonical page), so
  chains cannot form.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

CLUSTER_MODES = ("strict", "components")


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        parent.setdefault(x, x)
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def clusters(edges: Iterable[tuple[str, str]], mode: str = "strict") -> list[list[str]]:
    """Clusters of two or more documents. ``edges`` are ``(duplicate, canonical)`` pairs; in ``strict``
    mode only the first edge of each duplicate (its best canonical) counts. Each cluster lists its
    canonical first, then the other members in order of appearance."""
    if mode not in CLUSTER_MODES:
        raise ValueError(f"cluster mode must be one of {', '.join(CLUSTER_MODES)}; got {mode!r}")
    if mode == "strict":
        first: dict[str, str] = {}  # each duplicate's first canonical, in order of appearance
        for dup, canonical in edges:
            first.setdefault(dup, canonical)

        def root(key: str) -> str:
            # A canonical that became a near-duplicate itself (its group re-pointed to a better copy): its
            # members belong to the group it joined.
            seen = {key}
            while key in first and first[key] not in seen:
                key = first[key]
                seen.add(key)
            return key

        groups: dict[str, list[str]] = {}
        for dup, canonical in first.items():
            top = root(canonical)
            group = groups.setdefault(top, [top])
            if dup != top:
                group.append(dup)
        return list(groups.values())
    uf = UnionFind()
    order: dict[str, int] = {}
    for dup, canonical in edges:
        for x in (canonical, dup):
            order.setdefault(x, len(order))
        uf.union(dup, canonical)
    members: dict[str, list[str]] = defaultdict(list)
    for x in sorted(order, key=order.__getitem__):
        members[uf.find(x)].append(x)
    return [m for m in members.values() if len(m) > 1]
