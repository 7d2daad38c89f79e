"""Test spider: fetches ``base`` + each path listed (one per line) in ``paths_file``; one item per response.

    scrapy runspider paths.py -a base=http://127.0.0.1:PORT -a paths_file=FILE [-a keys=1]

With ``keys=1`` every request carries its own URL as ``neardup_key`` (a key given by the spider). With
``filtered=1`` the requests go through the dupefilter (they are ``dont_filter`` otherwise, so that a path
listed twice is fetched twice); with ``filtered=1`` the path ``/forced/...`` stays ``dont_filter``.
"""

import scrapy


class PathsSpider(scrapy.Spider):
    name = "paths"

    def __init__(self, base="", paths_file="", keys="", filtered="", **kwargs):
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        self.keys = bool(keys)
        self.filtered = bool(filtered)
        with open(paths_file, encoding="utf-8") as f:
            self.paths = [line.strip() for line in f if line.strip()]

    async def start(self):
        for path in self.paths:
            url = self.base + path
            forced = not self.filtered or path.startswith("/forced/")
            yield scrapy.Request(url, dont_filter=forced, meta={"neardup_key": url} if self.keys else {})

    def parse(self, response):
        yield {
            "url": response.url,
            "path": response.url[len(self.base) :],
            "status": response.status,
            "length": len(response.body),
        }
