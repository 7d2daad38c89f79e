"""The plugin's crawl side in the test's own process: a crawler built by ``scrapy.utils.test.get_crawler``, its
service opened as ``scrapy crawl`` opens it, and coroutines run on the asyncio reactor's loop (installed here
once per test process), so that the worker pipes, the threads and the store thread hand their results back
as they do in a crawl. Real stores, real workers; no download: the tests hand responses in."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


def reactor_loop() -> Any:
    """The asyncio loop of the process's Twisted reactor (installed now if no reactor is); the test is
    skipped in a process that installed another reactor first."""
    if "twisted.internet.reactor" not in sys.modules:
        from scrapy.utils.reactor import install_reactor

        install_reactor(ASYNCIO_REACTOR)
    from twisted.internet import reactor

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        pytest.skip("another Twisted reactor was installed in this test process")
    return loop


class InProcess:
    """A crawler and its open service. ``run`` awaits a coroutine on the reactor's loop."""

    def __init__(self, **settings: Any) -> None:
        from scrapy_neardup import Addon
        from scrapy_neardup.crawl.service import NearDupService

        self.loop = reactor_loop()
        spider_class = type("InProcessSpider", (Spider,), {"name": "inprocess"})
        self.crawler = get_crawler(
            spider_class,
            settings_dict={"ADDONS": {Addon: 300}, "NEARDUP_ENABLED": True, "LOG_LEVEL": "INFO", **settings},
        )
        self.spider = self.crawler.spider = spider_class()
        self.service = NearDupService.for_crawler(self.crawler)
        self.service.spider_opened(self.spider)

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)

    def stats(self, prefix: str = "neardup/") -> dict[str, Any]:
        return {k: v for k, v in self.crawler.stats.get_stats().items() if k.startswith(prefix)}

    def close(self) -> None:
        self.run(self.service.spider_closed(self.spider))
