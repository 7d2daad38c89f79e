"""Test spider: fetches ``base`` + each path listed (one per line) in ``paths_file``; one item per response.

    scrapy runspider paths.py -a base=http://127.0.0.1:PORT -a paths_file=FILE [-a keys=1]

With ``keys=1`` every request carries its own URL as ``neardup_key`` (a key given by the spider). With
``filtered=1`` the requests go through the dupefilter (they are ``dont_filter`` otherwise, so that a path
listed twice is fetched twice); with ``filtered=1`` the path ``/forced/...`` stays ``dont_filter``. With
``together=DIR:N`` the spider sends nothing until N spiders have opened (each leaves a file in DIR): crawl
processes started at once on one store then begin their crawl, as one crawl, before any of them files a page,
however unevenly a loaded machine starts them (waited for two minutes at most).
"""

import os
import time

import scrapy
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater


class PathsSpider(scrapy.Spider):
    name = "paths"

    def __init__(self, base="", paths_file="", keys="", filtered="", together="", **kwargs):
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        self.keys = bool(keys)
        self.filtered = bool(filtered)
        self.together = together
        with open(paths_file, encoding="utf-8") as f:
            self.paths = [line.strip() for line in f if line.strip()]

    async def start(self):
        if self.together:
            # Imported here, once Scrapy has installed its reactor: runspider imports this module before
            # Scrapy 2.13 installs it, and importing the reactor installs Twisted's default one.
            from twisted.internet import reactor

            folder, count = self.together.rsplit(":", 1)
            open(os.path.join(folder, f"opened-{os.getpid()}"), "w").close()
            waited_until = time.monotonic() + 120
            while len(os.listdir(folder)) < int(count) and time.monotonic() < waited_until:
                await maybe_deferred_to_future(deferLater(reactor, 0.05, lambda: None))
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
