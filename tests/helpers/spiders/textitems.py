"""Test spider for NEARDUP_ITEM_FIELD: one item per page, carrying the page's paragraph text in ``body``.

scrapy runspider textitems.py -a base=http://127.0.0.1:PORT -a paths_file=FILE
"""

import scrapy


class TextItemsSpider(scrapy.Spider):
    name = "textitems"

    def __init__(self, base="", paths_file="", **kwargs):
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        with open(paths_file, encoding="utf-8") as f:
            self.paths = [line.strip() for line in f if line.strip()]

    async def start(self):
        for path in self.paths:
            yield scrapy.Request(self.base + path, dont_filter=True)

    def parse(self, response):
        yield {
            "url": response.url,
            "body": " ".join(response.css("p::text").getall()),
            "near_duplicate_of": None,
            "near_duplicate_similarity": None,
        }
