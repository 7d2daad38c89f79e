"""A probe: what a CPU-bound crawl costs with the plugin on, step by step, with extraction taken away.

    python3 dev.py bench bench/crawl_floor.py DIR [--repeat 3] [--order shuffled-1] [--start lazy]
        [--steps off screened roundtrip handed]

One untimed crawl, each response handed to a worker (the ``handed`` step below, whose worker extracts for
real), records each page's worker result (its fingerprints and what it taught, as
the worker sent them). Then, in each round, in alternation, each crawl in a fresh process (``bench_crawl.py``'s
local site, settings and order; 2 workers, no recycling; tag mode, SQLite):

* ``off``: the plugin off;
* ``screened``: the plugin on, every response passed on right after the screening (HTML, status, size): no
  worker, no decision;
* ``handed``: each response also handed to a worker and its result awaited, then passed on undecided; the
  worker answers from the record (unpickles the page's arguments, looks the result up, sends it back);
* ``sent`` (with ``--steps``): handed to a worker as in ``handed``, but passed on at once, its result read
  by the reactor when it comes and not awaited: what the trip costs when the response does not wait for it;
* ``roundtrip`` (with ``--steps``): the plugin off, ``bench_crawl.py``'s ``roundtrip`` variant (each body
  sent to a worker of the plugin's pool and a 300-byte reply awaited, no plugin code): the bare trip, to set
  beside ``handed`` in the same rounds;
* ``decided``: the whole path (the soft-404 check, the declared page, the decision in the store, the
  learned templates' bookkeeping), the worker answering from the record: a crawl whose extraction is free;
* ``memory`` (with ``--steps``): ``decided`` on the in-memory store (``memory://``) instead of SQLite;
* ``unique`` (with ``--steps``): ``decided`` with every decision answered "unique" at once, nothing filed
  (``StoreThread._decide`` swapped): the path without the decision itself;
* ``unique-real`` (with ``--steps``): the defaults (extraction for real, the templates learned) with every
  decision answered "unique" at once as in ``unique``: how near the crawl would come if the decision cost the
  crawler process nothing (moved to a process of its own, say) and everything else stayed;
* ``grouped``, ``grouped2``, ``grouped5`` (with ``--steps``): ``decided`` with the decisions asked for
  meanwhile run one after another, in order, on the event loop's next turn, or 2 or 5 ms after the first
  of them was asked for: whether a decision costs less when the crawl's other work does not run between
  decisions (the caches it leaves cold);
* ``real``: the defaults.

Printed: for each, the median wall time, T / T_off, the crawler's and the workers' CPU ms a page, the
garbage collector's CPU seconds in the crawler process, and how many pages the record missed (a missed page
is extracted for real). What separates ``decided`` from ``real`` is the workers' own CPU and what it does to
the crawler process (two cores shared, pages waiting longer for a worker); what separates ``off``,
``screened``, ``handed`` and ``decided`` is the crawler process's own work, on its reactor thread. The steps
are swapped in inside the crawl's process (a probe that knows the middleware's internals); the worker's
record is read from files this probe wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import importlib
import json
import os
import pickle
import statistics
import sys
import tempfile
import zlib
from functools import partial
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

#: The folder of the record, and whether the workers write it or answer from it (set before any worker starts).
RECORD_ENV, MODE_ENV = "CRAWL_FLOOR_RECORD", "CRAWL_FLOOR_MODE"
STEPS = ("off", "screened", "handed", "decided", "real")
#: Steps run only when asked for (``--steps``).
OPTIONAL_STEPS = ("sent", "roundtrip", "memory", "unique", "unique-real", "grouped", "grouped2", "grouped5")
#: The steps whose crawl runs as it is, with these settings over the probe's (the plugin on, 2 workers).
UNPATCHED_STEPS = {"off": {"NEARDUP_ENABLED": False}, "real": {}, "roundtrip": bench_crawl.VARIANTS["roundtrip"]}
#: Settings of a patched step over the probe's.
STEP_SETTINGS = {"memory": {"NEARDUP_STORE_URL": "memory://"}}
#: The ``grouped*`` steps: how long after the first decision asked for the group is decided (``None``: the
#: event loop's next turn).
GROUP_DELAYS = {"grouped": None, "grouped2": 0.002, "grouped5": 0.005}

#: Recorded results by page (:func:`_page_key`), and by its bytes alone (``(length, crc)``): byte-identical
#: pages share one job, so the recording crawl sent only the first of them it met to a worker.
_record: dict[tuple, tuple[str, tuple]] | None = None


def _page_key(body: bytes, url: str) -> tuple[int, int, str]:
    """A page by its bytes and its path (the local site's port changes from crawl to crawl)."""
    return len(body), zlib.crc32(body), url.split("/", 3)[-1]


def recorded_analysis(body: bytes, url: str, content_type: str | None, offers: Any = None) -> tuple:
    """The worker task swapped in for ``analyze_html``: the real task, its result appended to this
    worker's record file (``record``), or the recorded result of the page (``replay``; a page not recorded
    is extracted for real and counted in a file of misses)."""
    from scrapy_neardup.workers.tasks import analyze_html

    global _record
    folder, mode = os.environ[RECORD_ENV], os.environ[MODE_ENV]
    key = _page_key(body, url)
    origin = url[: len(url) - len(key[2])]
    if mode == "record":
        result = analyze_html(body, url, content_type, offers)
        with open(os.path.join(folder, f"{os.getpid()}.pk"), "ab") as f:
            pickle.dump((key, (origin, result)), f)
        return result
    if _record is None:
        _record = {}
        for name in glob.glob(os.path.join(folder, "*.pk")):
            with open(name, "rb") as f:  # written by this probe's own recording crawl
                while True:
                    try:
                        recorded_key, result = pickle.load(f)
                    except EOFError:
                        break
                    _record[recorded_key] = result
                    _record.setdefault(recorded_key[:2], result)
    recorded = _record.get(key)
    if recorded is None:  # a copy of a page's bytes: the recording crawl sent only the first met to a worker
        recorded = _record.get(key[:2])
    if recorded is None:
        with open(os.path.join(folder, "misses"), "a") as f:
            f.write(key[2] + "\n")
        return analyze_html(body, url, content_type, offers)
    # A declared canonical was resolved against the recording crawl's site, on another port.
    recorded_origin, result = recorded
    return tuple(_moved(value, recorded_origin, origin) for value in result)


def _moved(value: Any, recorded_origin: str, origin: str) -> Any:
    if isinstance(value, str) and value.startswith(recorded_origin):
        return origin + value[len(recorded_origin) :]
    return value


def _stepped(step: str, crawl: Any) -> Any:
    """``bench_crawl.crawl_child`` with the middleware cut at ``step`` and the worker's task swapped for
    :func:`recorded_analysis` (by its module's name, which the workers import from this folder)."""

    def run(*crawl_args: Any) -> None:
        from scrapy_neardup.crawl import screening
        from scrapy_neardup.crawl.downloader import NearDupDownloaderMiddleware
        from scrapy_neardup.crawl.screening import Skip, response_job

        if step == "unique-real":  # the workers extract for real
            _answer_unique()
            crawl(*crawl_args)
            return
        task = importlib.import_module("crawl_floor").recorded_analysis
        call = screening.Job.call

        def recorded_call(job: Any, offers: Any = None) -> tuple:
            fn, *args = call(job, offers)
            return (task if fn is screening.analyze_html else fn, *args)

        screening.Job.call = recorded_call  # type: ignore[method-assign,assignment]

        async def screened(self: Any, request: Any, response: Any, key: str, own_key: bool) -> Any:
            return Skip("probe")

        async def handed(self: Any, request: Any, response: Any, key: str, own_key: bool) -> Any:
            await self.service.prepare(key, response_job(response, self.config.max_body_size), response.url)
            return Skip("probe")

        unawaited: set[asyncio.Future] = set()

        async def sent(self: Any, request: Any, response: Any, key: str, own_key: bool) -> Any:
            job = response_job(response, self.config.max_body_size)
            trip = asyncio.ensure_future(self.service.prepare(key, job, response.url))
            unawaited.add(trip)  # held until it is done: the loop keeps only weak references to tasks
            trip.add_done_callback(unawaited.discard)
            return Skip("probe")

        if step in ("screened", "handed", "sent"):
            cut = {"screened": screened, "handed": handed, "sent": sent}[step]
            NearDupDownloaderMiddleware._checked = cut  # type: ignore[method-assign,assignment]
        elif step == "unique":
            _answer_unique()
        elif step in GROUP_DELAYS:
            _group_decisions(GROUP_DELAYS[step])
        crawl(*crawl_args)

    return run


def _answer_unique() -> None:
    """Every decision answered "unique" at once, nothing filed or looked up (the ``unique`` and
    ``unique-real`` steps)."""
    from scrapy_neardup.crawl.storethread import Outcome, StoreThread
    from scrapy_neardup.engine.detector import Verdict

    def answered(self: Any, detector: Any, key: str, url: Any, prepared: Any, declared: Any) -> Any:
        return Outcome(prepared, Verdict("unique", key, key, 1.0))

    StoreThread._decide = answered  # type: ignore[method-assign]


def _group_decisions(delay: float | None) -> None:
    """Decisions asked for meanwhile decided one after another, in the order asked, on the loop's next turn
    or ``delay`` seconds after the first of them (the ``grouped*`` steps; a local store's decisions run on the
    reactor, as ``StoreThread._run`` runs them)."""
    from scrapy_neardup.crawl.screening import Skip
    from scrapy_neardup.crawl.storethread import Outcome, StoreThread

    waiting: list[tuple[asyncio.Future, tuple]] = []

    def decide_waiting(thread: Any) -> None:
        group = waiting[:]
        del waiting[:]
        for future, args in group:
            with thread._lock:
                future.set_result(thread._decide(thread.detector, *args))

    async def decide(self: Any, key: str, url: Any, prepared: Any, declared: Any) -> Any:
        if prepared.fingerprint is None:
            return Outcome(prepared, Skip(prepared.skip_reason or "no_text"))
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting.append((future, (key, url, prepared, declared)))
        if len(waiting) == 1:
            if delay is None:
                loop.call_soon(decide_waiting, self)
            else:
                loop.call_later(delay, decide_waiting, self)
        return await future

    StoreThread.decide = decide  # type: ignore[method-assign]


def _wrapped(step: str, crawl: Any) -> Any:
    return bench_crawl.collected(crawl if step in UNPATCHED_STEPS else _stepped(step, crawl))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--start",
        choices=("eager", "lazy"),
        default="eager",
        help="start requests read ahead as Scrapy does (eager), or each one yielded when the engine can send it "
        "(lazy: bench_crawl.py --start)",
    )
    parser.add_argument(
        "--steps", nargs="+", choices=STEPS + OPTIONAL_STEPS, default=list(STEPS), help="the steps, in this order"
    )
    args = parser.parse_args()
    if "off" not in args.steps:
        parser.error("--steps needs off: every step is divided by it")
    folder = tempfile.mkdtemp(prefix="crawl-floor-")
    os.environ[RECORD_ENV] = folder
    settings = {
        "NEARDUP_ENABLED": True,
        "NEARDUP_WORKERS": 2,
        "NEARDUP_WORKER_MAX_TASKS": 0,
        bench_crawl.LAZY_START: args.start == "lazy",
    }

    os.environ[MODE_ENV] = "record"
    # Every response handed to a worker (none predicted by a URL rule, as some are when decided): all recorded.
    bench_crawl.probe_crawl(args.dataset, args.order, settings, partial(_stepped, "handed"))
    if not glob.glob(os.path.join(folder, "*.pk")):
        raise SystemExit("the recording crawl recorded nothing")

    os.environ[MODE_ENV] = "replay"
    runs: dict[str, list[dict]] = {step: [] for step in args.steps}
    for round_ in range(args.repeat):
        for step in args.steps:
            step_settings = {**settings, **UNPATCHED_STEPS.get(step, {}), **STEP_SETTINGS.get(step, {})}
            result, server_cpu = bench_crawl.probe_crawl(
                args.dataset, args.order, step_settings, partial(_wrapped, step)
            )
            result["server_cpu"] = server_cpu
            runs[step].append(result)
            print(f"round {round_ + 1} {step}: {result['seconds']:.2f} s", file=sys.stderr, flush=True)
    misses_file = os.path.join(folder, "misses")
    misses = 0
    if os.path.exists(misses_file):
        with open(misses_file) as f:
            misses = sum(1 for _ in f)
    pages = int(runs["off"][0]["stats"].get("downloader/response_count", 0)) or 1
    rows = {
        step: {
            **bench_crawl.timing_row(results, runs["off"], pages),
            "server_cpu_seconds": round(statistics.median(r["server_cpu"] for r in results), 2),
            "collector_cpu_seconds": round(statistics.median(r["collector_cpu"] for r in results), 2),
        }
        for step, results in runs.items()
    }
    print(
        json.dumps(
            {
                "command": " ".join(["bench/crawl_floor.py", *sys.argv[1:]]),
                "pages": pages,
                "repeat": args.repeat,
                "start": args.start,
                "record_misses": misses,
                "rows": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
