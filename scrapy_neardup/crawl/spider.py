"""Spider middleware: carries a tagged page's verdict to the items parsed from it.

Only the spider middleware sees both the response and the items produced from it, so the tagging of
items happens here. A near-duplicate's items get ``near_duplicate_of`` (the page its group goes by in this
crawl, :mod:`.groups`; for a soft-404 page, the URL that cannot exist that its host answered alike) and
``near_duplicate_similarity``; every checked page's items get ``near_duplicate_group`` where the item declares
it (the group's name: a page of no group is the name of its own).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item

from .meta import META_VERDICT
from .service import NearDupService

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

logger = logging.getLogger("scrapy_neardup")

FIELD_CANONICAL = "near_duplicate_of"
FIELD_SIMILARITY = "near_duplicate_similarity"
FIELD_GROUP = "near_duplicate_group"


class ItemTagger:
    """Sets the near-duplicate fields on any item type, warning once per class that cannot hold them."""

    def __init__(self, service: NearDupService) -> None:
        self.service = service
        self._warned: set[type] = set()

    @staticmethod
    def group(item: Any, name: str) -> None:
        """``near_duplicate_group`` on an item that declares it (an item that does not is left as it is)."""
        try:
            ItemAdapter(item)[FIELD_GROUP] = name
        except KeyError:
            pass

    def tag(self, item: Any, canonical: str, similarity: float) -> None:
        adapter = ItemAdapter(item)
        self.group(item, canonical)
        try:
            adapter[FIELD_CANONICAL] = canonical
            adapter[FIELD_SIMILARITY] = similarity
        except KeyError:
            self.service.report.count("neardup/items/untaggable")
            cls = type(item)
            if cls not in self._warned:
                self._warned.add(cls)
                logger.warning(
                    "scrapy-neardup: cannot tag %s items as near-duplicates: the class has no %r and %r fields. "
                    "Declare them (%s = scrapy.Field() and %s = scrapy.Field(), or dataclass/attrs fields "
                    "with default None) to receive the tags; until then such items pass untagged.",
                    cls.__name__,
                    FIELD_CANONICAL,
                    FIELD_SIMILARITY,
                    FIELD_CANONICAL,
                    FIELD_SIMILARITY,
                )
            return
        self.service.report.count("neardup/items/tagged")


class NearDupSpiderMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.service = NearDupService.for_crawler(crawler)
        self.tagger = ItemTagger(self.service)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: object = None
    ) -> AsyncIterator[Any]:
        verdict = response.meta.get(META_VERDICT) if response.request is not None else None
        # A soft-404 page's items too: tagged with the URL that cannot exist its host answered alike.
        duplicate = bool(verdict and (verdict.get("duplicate") or verdict.get("status") == "soft404"))
        group = verdict.get("group") if verdict and verdict.get("status") != "skipped" else None
        async for output in result:
            if duplicate and is_item(output):
                self.tagger.tag(output, group or verdict["canonical"], verdict["similarity"])  # type: ignore[index]
            elif group and is_item(output):
                self.tagger.group(output, group)
            yield output
