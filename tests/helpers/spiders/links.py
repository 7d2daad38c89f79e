"""Test spider: fetches ``base`` + ``start`` (an index page) and follows every link on it, in page order, as a
crawl discovers pages (requests go through the dupefilter); one item per page. Links of other pages are not
followed.

    scrapy runspider links.py -a base=http://127.0.0.1:PORT [-a start=/index] [-a allowed=DOMAIN,...]
"""

import scrapy


class LinksSpider(scrapy.Spider):
    name = "links"

    def __init__(self, base="", start="/index", allowed="", **kwargs):
        super().__init__(**kwargs)
        if allowed:  # -a allowed=127.0.0.1: the spider's allowed_domains
            self.allowed_domains = allowed.split(",")
        self.base = base.rstrip("/")
        self.start_path = start

    async def start(self):
        yield scrapy.Request(self.base + self.start_path, callback=self.parse_index, meta={"neardup_enabled": False})

    def parse_index(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    def parse(self, response):
        yield {"url": response.url, "path": response.url[len(self.base) :], "status": response.status}
