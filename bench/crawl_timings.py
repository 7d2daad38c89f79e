"""A probe: what the plugin costs per page beyond extraction, step by step, in a real crawl of a labelled set.

    python bench/crawl_timings.py ../shared/neardup-dev [-s NAME=VALUE ...]

The crawl of ``bench/crawl_devset.py`` fetches one page at a time (``CONCURRENT_REQUESTS = 1``, so no page waits for
another) and times, per page: the extraction (trafilatura, as timed by the worker process that ran it), the
worker's whole job (decoding and fingerprints too), the store thread's part (template guard and
check-and-insert), the trips (``check`` less extraction and store: the body to the worker, fingerprinting
there, the result to the store thread and back to the reactor), the transport alone (``check`` less the
worker's job and the store's), of which the pipe (from the page handed to a worker to its result read,
less the worker's job) and its two crossings (``to_worker``: handed over to the job begun; ``back``: the
job's end to its result read), and the downloader middleware's whole ``process_response``. The plugin's own
cost beyond extraction is the
middleware's time less the extraction's: fingerprinting, the trip to and from the worker, the template
guard, the store, stats and logging. It also crawls once with the plugin disabled for the crawl rate.

It then does the same work again in this one process, page after page with no wait between them
(``back_to_back``): the worker's job beyond extraction (decoding, fingerprints, the declared canonical) and
the decision on a new SQLite store, so that the code's own cost can be told from what a process pays for
waking up after each page (a crawl one page at a time sleeps while the worker extracts).

The steps are timed by wrapping the service's methods and the pool's pipe I/O: this probe reads the
plugin's internals (a suite, such as ``bench/crawl_devset.py``, uses only its public API).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crawl_devset import crawl, crawl_settings, scored, serve

from scrapy_neardup.offline.evaluation import load_manifest


class Timings:
    """Per-page seconds of the plugin's steps, recorded by wrapping them (the bench's own instrumentation)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {"extract": [], "work": [], "store": [], "check": [], "middleware": []}
        self.sent: list[float] = []  # when each page was handed to a worker, and when its result was read
        self.read: list[float] = []
        self.reused: list[bool] = []  # per page: its body's job was another page's (NEARDUP_BODY_CACHE_SIZE)
        self.started: list[float] = []  # per page: when the worker began its job (the machine's monotonic clock)

    def wrap(self, owner: type, name: str, label: str) -> None:
        import functools
        import inspect

        original = getattr(owner, name)
        record = self.seconds[label]
        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed_async(*args, **kwargs):  # type: ignore[no-untyped-def]
                started = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    record.append(time.perf_counter() - started)

            setattr(owner, name, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    record.append(time.perf_counter() - started)

            setattr(owner, name, timed)

    @staticmethod
    def stamp(owner: type, name: str, times: list[float]) -> None:
        """Record when ``owner.name`` is called."""
        import functools

        original = getattr(owner, name)

        @functools.wraps(original)
        def stamped(*args, **kwargs):  # type: ignore[no-untyped-def]
            times.append(time.perf_counter())
            return original(*args, **kwargs)

        setattr(owner, name, stamped)

    def install(self) -> None:
        from scrapy_neardup.crawl.downloader import NearDupDownloaderMiddleware
        from scrapy_neardup.crawl.service import NearDupService
        from scrapy_neardup.crawl.storethread import StoreThread
        from scrapy_neardup.workers import ExtractionPool

        self.wrap(NearDupDownloaderMiddleware, "_checked", "check")  # a page prepared, decided and settled
        self.wrap(StoreThread, "_decide", "store")  # the store thread: template guard and store
        self.wrap(NearDupDownloaderMiddleware, "process_response", "middleware")
        self.stamp(ExtractionPool, "_send", self.sent)
        self.stamp(ExtractionPool, "_readable", self.read)
        settle = NearDupService.settle
        extract, work, reused, started = self.seconds["extract"], self.seconds["work"], self.reused, self.started

        def timed_settle(service, key, outcome):  # type: ignore[no-untyped-def]
            prepared = outcome.prepared  # the worker's own timing of the extraction and of its whole job
            extract.append(prepared.extract_seconds)
            work.append(prepared.work_seconds)
            reused.append(prepared.reused)
            started.append(prepared.work_started)
            return settle(service, key, outcome)

        NearDupService.settle = timed_settle  # type: ignore[method-assign]

    @staticmethod
    def stats(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "median_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
            "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e3, 3),
            "mean_ms": round(sum(ordered) / len(ordered) * 1e3, 3),
            "n": len(ordered),
        }

    def summary(self) -> dict[str, Any]:
        stats = self.stats
        # Pages that reused another page's job (byte-identical bodies) went to no worker: they are counted,
        # and left out of the per-page figures, which pair each extracted page's steps.
        extracted = [not r for r in self.reused]
        seconds = {
            label: [v for v, keep in zip(values, extracted) if keep] if len(values) == len(extracted) else values
            for label, values in self.seconds.items()
        }
        out: dict[str, Any] = {label: stats(values) for label, values in seconds.items() if values}
        out["reused_pages"] = sum(self.reused)
        middleware = seconds["middleware"]
        if len(middleware) == len(seconds["extract"]):
            out["beyond_extraction"] = stats([m - e for m, e in zip(middleware, seconds["extract"])])
        check, store, work = seconds["check"], seconds["store"], seconds["work"]
        if len(check) == len(seconds["extract"]) == len(store):  # the trips to the worker and back
            out["trips"] = stats([c - e - s for c, e, s in zip(check, seconds["extract"], store)])
        if len(check) == len(work) == len(store):
            # The worker's job beyond extraction (decoding, fingerprints), and the page's travel alone.
            out["worker_beyond_extraction"] = stats([w - e for w, e in zip(work, seconds["extract"])])
            out["transport"] = stats([c - w - s for c, w, s in zip(check, work, store)])
        if len(self.sent) == len(self.read) == len(work):
            # Of the transport, the pipe: from the page handed to a worker to its result read, less the
            # worker's job (both crossings, the worker's and the reactor's wake-ups); the rest is the
            # crawler's own handling (pickling, reading the result, the middleware around the check).
            out["pipe"] = stats([r - s - w for s, r, w in zip(self.sent, self.read, work)])
            began = [b for b, keep in zip(self.started, extracted) if keep]
            if len(began) == len(work):
                # The pipe's two crossings, by the machine's monotonic clock, which every process reads
                # alike: from the page handed over (pickled and written) to the worker's job begun (the
                # worker woken, the body read and unpickled), and from the job's end to its result read here
                # (the result pickled and written, the reactor woken).
                out["to_worker"] = stats([b - s for s, b in zip(self.sent, began)])
                out["back"] = stats([r - b - w for b, r, w in zip(began, self.read, work)])
        return out


def back_to_back(settings: dict, dataset: str, manifest: list[dict]) -> dict[str, dict[str, float]]:
    """The plugin's steps beyond extraction run here, page after page (see the module's docstring); per-page
    seconds, summarised as :meth:`Timings.summary` does."""
    from scrapy_neardup.assembly import build_pipeline, build_template_guard, open_detector
    from scrapy_neardup.engine.canonical import declared_canonical
    from scrapy_neardup.engine.decisions import DecisionLoop
    from scrapy_neardup.engine.extract import decode_html
    from scrapy_neardup.offline.evaluation import read_page
    from scrapy_neardup.settings import Config
    from scrapy_neardup.store import store_from_url

    config = Config.from_settings({k: v for k, v in settings.items() if k.startswith("NEARDUP_")})
    pipeline = build_pipeline(config)
    folder = tempfile.TemporaryDirectory()
    store = store_from_url(f"sqlite:///{os.path.join(folder.name, 'back-to-back.sqlite')}")
    _, detector, _ = open_detector(config, store)
    loop = DecisionLoop(detector, build_template_guard(config, detector.algorithm))
    clock = time.perf_counter
    worker, decision = [], []
    try:
        for row in manifest:
            body = read_page(os.path.join(dataset, row["file"]))
            t0 = clock()
            html = decode_html(body, "text/html")
            t1 = clock()
            got = pipeline.text_of(html, row["url"])  # the extraction: not counted
            t2 = clock()
            prepared = pipeline.from_extraction(got)
            if pipeline.find_canonical:
                declared_canonical(html, row["url"])
            t3 = clock()
            worker.append(t1 - t0 + t3 - t2)
            if prepared.fingerprint is not None:
                loop.decide(row["url"], row["url"], prepared)
                decision.append(clock() - t3)
    finally:
        detector.close()
        folder.cleanup()
    return {"worker_beyond_extraction": Timings.stats(worker), "store": Timings.stats(decision)}


def _crawl_seconds(settings: dict, base: str, manifest: list[dict]) -> float:
    return crawl(settings, base, manifest)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    base, server_process = serve(args.dataset, manifest)
    out = os.path.join(tempfile.mkdtemp(), "items.jsonl")
    settings = crawl_settings(out, args.settings)
    # One page at a time, so that no page waits for another.
    settings["CONCURRENT_REQUESTS"] = 1
    if not any(item.startswith("NEARDUP_STORE_URL=") for item in args.settings):
        # Time the default store (a SQLite file), not the in-memory one.
        settings["NEARDUP_STORE_URL"] = f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'devset.sqlite')}"
    # Two crawls in one process need a reactor that can be started again: the plugin-off one in a subprocess.
    with multiprocessing.get_context("fork").Pool(1) as pool:
        off_seconds = pool.apply(_crawl_seconds, ({**settings, "NEARDUP_ENABLED": False}, base, manifest))
    timings = Timings()
    timings.install()
    crawler, seconds = crawl(settings, base, manifest)
    server_process.terminate()
    summary: dict[str, Any] = scored(crawler, seconds, manifest, out)
    summary.update(
        {
            "settings": args.settings,
            "timings": timings.summary(),
            "back_to_back": back_to_back(settings, args.dataset, manifest),
            "pages_per_sec_plugin_off": round(len(manifest) / off_seconds, 1),
            "pages_per_sec_plugin_on": round(len(manifest) / seconds, 1),
        }
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
