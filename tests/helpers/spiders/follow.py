"""Test spider: a whole-site crawl. Fetches ``base`` + ``start`` and follows every link of every page it
gets (requests go through the dupefilter, as in any crawl); one item per page whose path starts with
``items``.

    scrapy runspider follow.py -a base=http://127.0.0.1:PORT [-a start=/] [-a items=/a/]
"""

import scrapy


class FollowSpider(scrapy.Spider):
    name = "follow"

    def __init__(self, base="", start="/", items="/", **kwargs):
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        self.start_path = start
        self.items_prefix = items

    async def start(self):
        yield scrapy.Request(self.base + self.start_path, callback=self.parse, meta={"neardup_enabled": False})

    def parse(self, response):
        path = response.url[len(self.base) :]
        if path.startswith(self.items_prefix):
            yield {"url": response.url, "path": path}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
