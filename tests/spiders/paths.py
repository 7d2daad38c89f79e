"""Test spider: fetches ``base`` + each path listed (one per line) in ``paths_file``; one item per response.

    scrapy runspider paths.py -a base=http://127.0.0.1:PORT -a paths_file=FILE
"""

import scrapy


class PathsSpider(scrapy.Spider):
    name = "paths"

    def __init__(self, base="", paths_file="", **kwargs):
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        with open(paths_file, encoding="utf-8") as f:
            self.paths = [line.strip() for line in f if line.strip()]

    async def start(self):
        for path in self.paths:
            yield scrapy.Request(self.base + path, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "path": response.url[len(self.base):], "status": response.status,
               "length": len(response.body)}
