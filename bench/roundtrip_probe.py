"""The plugin's trip to a worker and back, without the plugin: ``bench_crawl.py --variants roundtrip``.

A downloader middleware (the plugin itself off) that sends each response's body to one of the worker
processes (``NEARDUP_WORKERS``, two in the bench) of the plugin's own pool
(:class:`~scrapy_neardup.workers.ExtractionPool`, its results read by the reactor as in a crawl) and waits for
a reply of 300 bytes, about the size of a page's fingerprints, before it passes the response on. What the
crawler process pays for that trip is the part of the plugin's cost that no work on extraction or on the
decision can take away while each page goes to a worker and back.

``ROUNDTRIP_WORKER_MS`` (a setting of this probe's, default 0): the worker spends that many milliseconds of CPU
on each page before it replies, as the plugin's workers spend theirs on extraction and fingerprints: what the
workers' CPU alone costs a crawl on the machine's cores, with none of the plugin's work in the crawler.
"""

from __future__ import annotations

import time
from typing import Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_neardup.crawl.reactor import pool_reader, reply
from scrapy_neardup.settings import Config
from scrapy_neardup.workers import ExtractionPool

#: Bytes of the reply: a MinHash-128 signature in 16 bits (256 bytes) and its band keys, near enough.
REPLY_BYTES = 300


def small_reply(body: bytes, cpu_seconds: float = 0.0) -> bytes:
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass
    return bytes(REPLY_BYTES)


class RoundTripMiddleware:
    def __init__(self, crawler: Any) -> None:
        workers = crawler.settings.getint("NEARDUP_WORKERS", 2) or 2
        self.pool = ExtractionPool(Config.from_settings(crawler.settings), workers)
        self.pool.start(pool_reader())
        self.cpu_seconds = crawler.settings.getfloat("ROUNDTRIP_WORKER_MS", 0.0) / 1000
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RoundTripMiddleware:
        return cls(crawler)

    def closed(self, spider: Any) -> None:
        self.pool.close()

    async def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        done: Deferred = Deferred()
        page = self.pool.submit(small_reply, response.body, self.cpu_seconds)
        page.add_done_callback(lambda settled: reply(done, settled.exception() or settled.result()))
        await maybe_deferred_to_future(done)
        return response
