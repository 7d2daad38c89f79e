"""Item pipeline: near-duplicate checks on items that carry their own text (``NEARDUP_ITEM_FIELD``).

When the spider builds the text to compare itself (say, an article body assembled from several
requests), set ``NEARDUP_ITEM_FIELD`` to the field that holds it. Each item is then fingerprinted on that
text and filed under its ``url`` field (or, lacking one, a hash of the text); near-duplicates are dropped
with :class:`~scrapy.exceptions.DropItem` or tagged, as ``NEARDUP_ACTION`` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mmh3
from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem, NotConfigured

from .screening import Skip, text_job
from .service import NearDupService
from .spider import ItemTagger

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self


class NearDupPipeline:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.service = NearDupService.for_crawler(crawler)
        field = self.service.config.item_field
        if not field:
            raise NotConfigured  # no NEARDUP_ITEM_FIELD: items are tagged from their pages, silently
        self.field = field
        self.tagger = ItemTagger(self.service)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_item(self, item: Any, spider: object = None) -> Any:
        adapter = ItemAdapter(item)
        text = adapter.get(self.field)
        if not isinstance(text, str):
            self.service.report.skip("item_without_text", str(adapter.get("url", "")))
            return item
        key = adapter.get("url")
        if not isinstance(key, str) or not key:
            key = "item:%032x" % mmh3.hash128(text, 0x17E5, signed=False)
        verdict = await self.service.check(key, text_job(text))
        if isinstance(verdict, Skip):
            return item
        name = self.service.names.of(verdict)
        if not verdict.is_duplicate:
            self.tagger.group(item, name)
            return item
        if self.service.config.action == "drop":
            self.service.report.count("neardup/dropped")
            raise DropItem(
                f"near-duplicate of {verdict.canonical} (similarity {verdict.similarity:.3f})", log_level="DEBUG"
            )
        self.tagger.tag(item, name, verdict.similarity)
        self.service.report.count("neardup/tagged")
        return item
