"""The plugin's trip to a worker and back, without the plugin: ``bench_crawl.py --variants roundtrip``; and
the same trip outside Scrapy, run as a script.

    python3 dev.py bench bench/roundtrip_probe.py DIR [--repeat 5]

A downloader middleware (the plugin itself off) that sends each response's body to one of the worker
processes (``NEARDUP_WORKERS``, two in the bench) of the plugin's own pool
(:class:`~scrapy_neardup.workers.ExtractionPool`, its results read by the reactor as in a crawl) and waits for
a reply of 300 bytes, about the size of a page's fingerprints, before it passes the response on. What the
crawler process pays for that trip is the part of the plugin's cost that no work on extraction or on the
decision can take away while each page goes to a worker and back.

``ROUNDTRIP_WORKER_MS`` (a setting of this probe's, default 0): the worker spends that many milliseconds of CPU
on each page before it replies, as the plugin's workers spend theirs on extraction and fingerprints: what the
workers' CPU alone costs a crawl on the machine's cores, with none of the plugin's work in the crawler.

:class:`HoldMiddleware` (``bench_crawl.py --variants hold4``) holds each response on a timer of
``ROUNDTRIP_HOLD_MS`` instead, with no worker: what a response's waiting alone costs the crawl.

Run as a script: the bodies of a labelled set's pages sent through the same pool, 32 at a time as the crawl
benchmark's concurrency, from a coroutine on Twisted's asyncio reactor (the reactor reading the workers'
pipes, as in a crawl), no Scrapy: prints one JSON object with this process's CPU milliseconds a page (medians
of ``--repeat`` rounds), what the trip's own work costs, to set beside what it costs a crawl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
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
        await round_trip(self.pool, response.body, self.cpu_seconds)
        return response


async def round_trip(pool: ExtractionPool, body: bytes, cpu_seconds: float = 0.0) -> None:
    """``body`` sent to a worker of ``pool``, which spends ``cpu_seconds`` on it, and its reply awaited: the
    result read by the reactor and handed back as the plugin's are."""
    done: Deferred = Deferred()
    page = pool.submit(small_reply, body, cpu_seconds)
    page.add_done_callback(lambda settled: reply(done, settled.exception() or settled.result()))
    await maybe_deferred_to_future(done)


class HoldMiddleware:
    """Each response held ``ROUNDTRIP_HOLD_MS`` milliseconds on the reactor's timer, then passed on."""

    def __init__(self, crawler: Any) -> None:
        self.seconds = crawler.settings.getfloat("ROUNDTRIP_HOLD_MS", 4.0) / 1000

    @classmethod
    def from_crawler(cls, crawler: Any) -> HoldMiddleware:
        return cls(crawler)

    async def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        from twisted.internet import reactor

        done: Deferred = Deferred()
        reactor.callLater(self.seconds, done.callback, None)
        await maybe_deferred_to_future(done)
        return response


def trip_alone(bodies: list[bytes], in_flight: int = 32) -> float:
    """CPU seconds of this process to send every body through a pool of two workers and await each reply,
    ``in_flight`` at a time, on the asyncio reactor (installed by :func:`main`)."""
    from twisted.internet import reactor

    pool = ExtractionPool(Config.from_settings({}), 2)
    pool.start(pool_reader())
    spent: list[float] = []

    async def run() -> None:
        try:
            await asyncio.sleep(1.0)  # the workers started
            room = asyncio.Semaphore(in_flight)

            async def limited(body: bytes) -> None:
                async with room:
                    await round_trip(pool, body)

            started = time.process_time()
            await asyncio.gather(*(limited(body) for body in bodies))
            spent.append(time.process_time() - started)
        finally:
            pool.close()
            reactor.stop()

    reactor.callWhenRunning(lambda: asyncio.ensure_future(run()))
    reactor.run()
    return spent[0]


def main() -> int:
    parser = argparse.ArgumentParser(description="the plugin's trip to a worker and back, outside Scrapy")
    parser.add_argument("dataset", help="a labelled set (manifest.jsonl and its pages)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from scrapy_neardup.offline.evaluation import load_manifest, read_page

    if os.environ.get("ROUNDTRIP_ONE_ROUND"):  # a round in a fresh process: a reactor runs once
        from twisted.internet import asyncioreactor

        asyncioreactor.install()
        manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
        bodies = [read_page(os.path.join(args.dataset, row["file"])) for row in manifest]
        print(json.dumps({"pages": len(bodies), "cpu_seconds": trip_alone(bodies)}))
        return 0
    rounds = []
    for _ in range(args.repeat):
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), args.dataset],
            env={**os.environ, "ROUNDTRIP_ONE_ROUND": "1"},
            capture_output=True,
            text=True,
            check=True,
        )
        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
    per_page = [1000 * r["cpu_seconds"] / r["pages"] for r in rounds]
    print(
        json.dumps(
            {
                "command": "bench/roundtrip_probe.py " + " ".join(sys.argv[1:]),
                "pages": rounds[0]["pages"],
                "in_flight": 32,
                "workers": 2,
                "cpu_ms_a_page_median": round(statistics.median(per_page), 3),
                "cpu_ms_a_page_rounds": [round(x, 3) for x in per_page],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
