"""A probe: which process holds a CPU-bound crawl back, the crawler or its extraction workers.

    python3 dev.py bench bench/crawl_states.py DIR [--order shuffled-1] [--off] [--census] [-s NAME=VALUE ...]

One crawl as ``bench_crawl.py`` runs it (the same local site, settings and order, 2 workers, no recycling),
with no profiler: a thread of the crawler process samples, every 5 ms, the scheduler's state of the
crawler's reactor thread and of each worker process (``R``: running or waiting for a core; ``S``: asleep,
waiting for work) and whether pages wait in the pool's queue, and the garbage collector's CPU time is read
by generation. Printed: the crawl's time and CPU (crawler, workers, the local server), the share of
samples the reactor was runnable, the share in which no, one or both workers were, the share with pages
queued, the seconds the reactor thread and the workers waited for a core (runnable, not running: the
kernel's ``/proc/PID/schedstat``), and the collector's seconds, collections and tracked objects at the end.

``--census`` also counts, at every tenth generation-1 collection, the objects the collector walks (its
generations 0 and 1) by type, and the live asyncio tasks by the coroutine they run: what makes the
collector's work (the counting adds to the crawl's time, not to the collector's).

A reactor runnable nearly always while workers sleep with pages queued is a crawl the crawler process
limits: work taken off the workers then buys nothing, work taken off the reactor does. This probe reads the
pool's internals (its queue and workers).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

#: How often the states are sampled, in seconds.
EVERY = 0.005


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def _run_delay(pid: int) -> float:
    """Seconds thread ``pid`` has waited for a core (runnable, not running) since it started."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class YoungCensus(bench_crawl.CollectorWatch):
    """At every ``every``-th generation-1 collection, the objects of generations 0 and 1 by type, and the
    asyncio tasks among them by their coroutine; :meth:`summary`: the means over the censuses."""

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self.collections = 0
        self.censuses = 0
        self.objects = 0
        self.types: collections.Counter[str] = collections.Counter()
        self.tasks: collections.Counter[str] = collections.Counter()

    def collection(self, phase: str, info: dict) -> None:
        if phase != "start" or info["generation"] != 1:
            return
        self.collections += 1
        if self.collections % self.every:
            return
        young = gc.get_objects(0) + gc.get_objects(1)
        self.censuses += 1
        self.objects += len(young)
        for obj in young:
            kind = type(obj)
            self.types[f"{kind.__module__}.{kind.__qualname__}"] += 1
            if isinstance(obj, asyncio.Task):
                coro = obj.get_coro()
                code = getattr(coro, "cr_code", None)
                name = getattr(code, "co_qualname", None) or getattr(code, "co_name", type(coro).__qualname__)
                self.tasks[name] += 1

    def summary(self) -> dict:
        n = self.censuses or 1
        return {
            "censuses": self.censuses,
            "young_objects": round(self.objects / n),
            "by_type": {k: round(v / n) for k, v in self.types.most_common(12)},
            "asyncio_tasks_by_coroutine": {k: round(v / n) for k, v in self.tasks.most_common(6)},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    parser.add_argument("--off", action="store_true", help="the plugin off")
    parser.add_argument(
        "--census", action="store_true", help="count the objects the collector walks, by type (slows the crawl)"
    )
    parser.add_argument(
        "-s", "--set", action="append", default=[], metavar="NAME=VALUE", help="a setting of the crawl (as scrapy -s)"
    )
    args = parser.parse_args()
    sampled = os.path.join(tempfile.mkdtemp(), "states.json")

    def probed(crawl):  # type: ignore[no-untyped-def]
        def run(*crawl_args):  # type: ignore[no-untyped-def]
            from scrapy_neardup import workers

            pools: list = []
            start = workers.ExtractionPool.start

            def started(pool, *a, **k):  # type: ignore[no-untyped-def]
                pools.append(pool)
                return start(pool, *a, **k)

            workers.ExtractionPool.start = started  # type: ignore[method-assign]
            states: collections.Counter[tuple[str, int, bool]] = collections.Counter()
            done = threading.Event()

            delays: dict[int, float] = {}
            reactor_delay = _run_delay(os.getpid())

            def sample() -> None:
                reactor = os.getpid()  # the crawler's main thread runs the reactor
                while not done.wait(EVERY):
                    pool = pools[0] if pools else None
                    pids = [w.process.pid for w in list(pool._workers)] if pool is not None else []
                    delays.update((pid, _run_delay(pid)) for pid in pids)
                    delays[reactor] = _run_delay(reactor) - reactor_delay
                    running = sum(1 for pid in pids if _state(pid) == "R")
                    states[(_state(reactor), running, bool(pool is not None and pool._queue))] += 1

            sampler = threading.Thread(target=sample, daemon=True)
            census = YoungCensus() if args.census else None
            # The census first: its counting is done before the collector's clock starts.
            with census or contextlib.nullcontext(), bench_crawl.CollectorTimer() as collector:
                sampler.start()
                try:
                    crawl(*crawl_args)
                finally:
                    done.set()
                    total = sum(states.values()) or 1
                    with open(sampled, "w") as f:
                        json.dump(
                            {
                                "samples": total,
                                "reactor_runnable": round(
                                    sum(n for (r, _, _), n in states.items() if r == "R") / total, 3
                                ),
                                "workers_runnable": {
                                    str(k): round(sum(n for (_, w, _), n in states.items() if w == k) / total, 3)
                                    for k in (0, 1, 2)
                                },
                                "pages_queued": round(sum(n for (_, _, q), n in states.items() if q) / total, 3),
                                "waited_for_a_core_seconds": {
                                    "reactor": round(delays.get(os.getpid(), 0.0), 2),
                                    "workers": round(sum(v for k, v in delays.items() if k != os.getpid()), 2),
                                },
                                "garbage_collector": collector.summary(),
                                **({"young_census": census.summary()} if census is not None else {}),
                            },
                            f,
                        )

        return run

    settings = {"NEARDUP_ENABLED": not args.off, "NEARDUP_WORKERS": 2, "NEARDUP_WORKER_MAX_TASKS": 0}
    for given in args.set:
        name, _, value = given.partition("=")
        settings[name] = value
    result, server_cpu = bench_crawl.probe_crawl(args.dataset, args.order, settings, probed)
    with open(sampled) as f:
        states = json.load(f)
    print(
        json.dumps(
            {
                "command": " ".join(["bench/crawl_states.py", *sys.argv[1:]]),
                "seconds": round(result["seconds"], 2),
                "crawler_cpu_seconds": round(result["crawler_cpu"], 2),
                "workers_cpu_seconds": round(result["worker_cpu"], 2),
                "server_cpu_seconds": round(server_cpu, 2),
                **states,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
