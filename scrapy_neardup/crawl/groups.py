"""The name a group of near-duplicates goes by in a crawl's items: one name from its first item on.

A group's page in the store may change during a crawl: a better copy met after the group's first page takes
the group (:mod:`scrapy_neardup.engine.bestcopy`), and a copy decided after that is filed as a
near-duplicate of the new page. The items already emitted cannot be called back, so naming each item after
the store's page of the moment makes chains (an item tagged as a copy of a page that was itself emitted as a
copy) and splits one article into several groups. A crawl therefore names each group after the page through
which it first reached the spider untagged (or, for a group whose page was met in an earlier crawl, that
page), and keeps the name for the rest of the crawl whatever the store re-points: ``near_duplicate_of``
never names a page emitted as a near-duplicate, and every item of a group carries one ``near_duplicate_group``.
The store's group page, which the next crawl names, is the best copy.
"""

from __future__ import annotations

from collections import OrderedDict

from ..engine.bounded import remember
from ..engine.detector import Verdict

#: Pages emitted as near-duplicates whose group name is remembered, the least recently named forgotten first
#: (a page forgotten and named as a group's page again gives that group its own name).
MAX_NAMED = 200_000


class GroupNames:
    """The name of each group met in this crawl (reactor thread). Only the names of pages emitted as
    near-duplicates are kept, and the names given: any other page is the name of its own group."""

    def __init__(self, limit: int = MAX_NAMED) -> None:
        self.limit = limit
        self._names: OrderedDict[str, str] = OrderedDict()
        self._given: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._names)

    def note(self, verdict: Verdict) -> str:
        """The name of the group ``verdict``'s page belongs to, remembered for the pages that will name this
        one as their group's page."""
        if verdict.status == "soft404":
            return verdict.canonical  # the URL that cannot exist its host answered alike
        if verdict.is_duplicate:
            name = self._names.get(verdict.canonical, verdict.canonical)
        elif verdict.displaced is not None and verdict.displaced in self._given:
            # A better copy taking a group whose page, met in an earlier crawl, already names copies emitted
            # in this one: it passes untagged, in that group.
            name = self._names.get(verdict.displaced, verdict.displaced)
        else:
            return verdict.key
        if name != verdict.key:
            remember(self._names, verdict.key, name, self.limit)
            remember(self._given, name, None, self.limit)
        return name

    def of(self, verdict: Verdict) -> str:
        """The name :meth:`note` gave ``verdict``'s group, without noting anything."""
        if verdict.status == "soft404":
            return verdict.canonical
        named = self._names.get(verdict.key)
        if named is not None:
            return named
        if not verdict.is_duplicate:
            return verdict.key
        return self._names.get(verdict.canonical, verdict.canonical)
