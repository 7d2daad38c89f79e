"""The crawl itself: a local site of real pages crawled with the plugin off and on, side by side.

    python dev.py bench bench/bench_crawl.py ../shared/neardup-dev --repeat 3              # timings
    python dev.py bench bench/bench_crawl.py ../shared/neardup-dev --quality               # crawl vs CLI F1
    python dev.py bench bench/bench_crawl.py ../shared/neardup-dev --stability 50          # 50 crawls, no crash

Every page of the set is served by one local site, ``http://127.0.0.1:PORT/<original host>/<original path>``:
one host, each page under its own path, which is what a site crawl meets (and what the template guard sees
as one host). The server runs in a process of its own with a listen backlog of 1,024 (``http.server``'s
default of 5 drops connections at crawl concurrency), every page decompressed in memory.

Timings: each round crawls the whole site once with the plugin off and once per pool size (``--pools``,
default 0, 1, 2 and the core count), in alternation, each crawl in a fresh process, ``CONCURRENT_REQUESTS``
32, tag mode, the default SQLite store in a fresh file. Printed: the median wall time of each, T_on / T_off,
pages/s, CPU seconds per page in the crawler process and in its extraction workers (read from /proc while
they run, by the bench's own process: the crawler only names its workers), the crawler's peak RSS and the
largest worker's peak RSS, and the last round's ``neardup/learned/*`` stats (where its pages' main text came
from: replayed, checked, sent to trafilatura). The floor: the crawl's own CPU per page with the plugin off,
plus the extraction and fingerprint CPU per page measured alone in one process over the pages with distinct
bodies (byte-identical copies reuse their first copy's job), divided by the cores.

The pages keep their real ``<link rel="canonical">`` declarations, made local: a declared URL that is a page
of the set is rewritten to that page's path on the one site (a syndicated copy then declares another
cluster's page of the same site, the trap real sites set), any other stays as it is (another site).

``--quality``: per crawl order (``--orders``: ``manifest``, ``copies-first`` (every page but the clusters'
originals first), ``shuffled-N`` (seed N)), one tag-mode crawl at the defaults, scored pairwise against the
labels, and ``scrapy-neardup dedup`` over a JSONL of the same pages in the same order, scored the same way.
``--aliases``: a site of aliases that declare their originals, as real sites serve them: each original of
the set under its path, a tracking-parameter copy (``?utm_source=feed``, the same bytes), an AMP copy
(``/amp/…``), and the cluster's print and noise pages, each declaring the original; crawled in drop mode,
copies first and shuffled, then again on the same store: how many pages of each group reached the spider.
``--recrawl``: drop mode, copies first, crawled twice on one store (the second time in reverse order): the
URLs each crawl emitted, whether they are the same, the groups each crawl re-pointed to a better copy (a
group first met through a worse copy emits that copy in the first crawl and its best copy from the second
on), and the share of clusters of which one page reached the spider. With
``--processes N``, N crawls at once share the store, each on every N-th page (so that copies of one text
fall to different crawls); ``--redis-cluster M`` gives them a real Redis Cluster of M masters
(``tests/helpers/redis_cluster.py``) as their store, ``NEARDUP_STORE_URL = redis+cluster://…``.

``--stability N``: N crawls at the defaults in a row; each must finish with no worker lost.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import unquote, urlsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import localsite  # noqa: E402  (bench/, the script's own folder)

from scrapy_neardup.engine.canonical import CANONICAL_SCAN_CHARS, declared_canonical  # noqa: E402
from scrapy_neardup.engine.extract import EXTRACTOR_NAMES, decode_html  # noqa: E402
from scrapy_neardup.offline.evaluation import Score, load_manifest, read_page, score  # noqa: E402


def site_path(url: str) -> str:
    """The page's path on the one local site: its original host (and port, which the set's made-up URLs
    use for text), then its original path and query, unquoted (the server and the scorer unquote what
    Scrapy requested, which percent-encodes non-ASCII paths; a few URLs of the set end in a space, which
    Scrapy strips)."""
    parts = urlsplit(url.strip())
    path = "/" + (parts.netloc or "nohost").replace(":", "_").replace("/", "_") + unquote(parts.path or "/")
    return path + ("?" + unquote(parts.query) if parts.query else "")


_LINK_TAG = re.compile(rb"<link\b[^>]*>", re.IGNORECASE)
_HREF = re.compile(rb"""(\bhref\s*=\s*)(["']?)([^"'\s>]*)\2""", re.IGNORECASE)


def local_canonical(body: bytes, url: str, in_set: set[str]) -> bytes:
    """The page with its declared canonical URL made a path of the one site when it is a page of the set."""
    declared = declared_canonical(decode_html(body), url)
    if declared is None or declared not in in_set:
        return body
    head = body[:CANONICAL_SCAN_CHARS]
    for tag in _LINK_TAG.finditer(head):
        if b"canonical" in tag.group(0).lower():
            local = _HREF.sub(lambda m: m.group(1) + b'"' + site_path(declared).encode() + b'"', tag.group(0), 1)
            return body[: tag.start()] + local + body[tag.end() :]
    return body


def load_pages(dataset: str, manifest: list[dict]) -> dict[str, bytes]:
    in_set = {row["url"] for row in manifest}
    pages = {}
    for row in manifest:
        pages[site_path(row["url"])] = local_canonical(
            read_page(os.path.join(dataset, row["file"])), row["url"], in_set
        )
    return pages


def crawl_orders(manifest: list[dict], names: list[str]) -> dict[str, list[str]]:
    """The site's paths in each named order."""
    out = {}
    for name in names:
        if name == "manifest":
            rows = manifest
        elif name == "copies-first":
            rows = sorted(manifest, key=lambda r: r["kind"] == "original")
        elif name.startswith("shuffled-"):
            rows = random.Random(int(name.split("-", 1)[1])).sample(manifest, len(manifest))
        else:
            raise SystemExit(f"unknown order {name!r}: manifest, copies-first or shuffled-N")
        out[name] = [site_path(r["url"]) for r in rows]
    return out


def serve(pages: dict[str, bytes]) -> tuple[str, multiprocessing.Process]:
    def page(request) -> tuple[bytes, str] | None:  # type: ignore[no-untyped-def]
        body = pages.get(unquote(request.path))
        return None if body is None else (body, "text/html; charset=utf-8")

    return localsite.serve(page)


def _proc_cpu_and_hwm(pid: int) -> tuple[float, int] | None:
    """(user + system CPU seconds, peak RSS in bytes) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, hwm


#: A setting of the benchmark's own (``--start lazy``): the spider yields its next start request only when the
#: engine can send it, as Scrapy's documentation shows for long start lists. By default Scrapy reads
#: ``start()`` ahead into its scheduler whenever the downloader is full: against a local server a plugin-off
#: crawl rarely fills it, and the plugin's crawl, whose responses wait for their workers, nearly always does,
#: so it alone holds thousands of requests in memory for the garbage collector to walk. Over a network both
#: keep the downloader full; paced, both hold the same few requests.
LAZY_START = "BENCH_LAZY_START"


#: The fields of a page's verdict (its ``neardup`` meta) each crawled page's item carries.
VERDICT_FIELDS = ("key", "status", "duplicate", "canonical", "similarity")


def crawl_child(base: str, paths: list[str], settings: dict, out: str) -> None:
    """One crawl in this (fresh) process; writes its measurements as JSON to ``out``."""
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    class SiteSpider(scrapy.Spider):
        name = "site"

        async def start(self):  # type: ignore[no-untyped-def]
            lazy = self.settings.getbool(LAZY_START)
            for path in paths:  # through the dupefilter, as a crawl's links: a declared page is delivered once
                if lazy and self.crawler.engine.needs_backout():  # Scrapy's "lazy start requests"
                    await self.crawler.signals.wait_for(signals.scheduler_empty)
                yield scrapy.Request(base + path)

        def parse(self, response):  # type: ignore[no-untyped-def]
            marks.setdefault("first_page", time.perf_counter() - started)
            verdict = response.meta.get("neardup") or {}
            yield {"path": unquote(response.url[len(base) :]), **{k: verdict.get(k) for k in VERDICT_FIELDS}}

    items_path = out + ".items.jsonl"
    process = CrawlerProcess({**settings, "FEEDS": {items_path: {"format": "jsonlines", "overwrite": True}}})
    crawler = process.create_crawler(SiteSpider)
    noted: set[int] = set()

    def note_workers() -> None:
        """Append the crawl's worker pids not noted yet to the pids file, where the bench's own process reads
        their CPU (:class:`WorkerWatch`): here only the pool is asked, which costs the reactor next to nothing."""
        from scrapy.exceptions import NotConfigured

        from scrapy_neardup.crawl.service import NearDupService

        try:
            pids = NearDupService.for_crawler(crawler).worker_pids()
        except NotConfigured:  # the crawl with the plugin off: no service is built, so stop asking
            if loops and loops[0].running:
                loops[0].stop()
            return
        new = [pid for pid in pids if pid not in noted]
        if new:
            noted.update(new)
            with open(out + PIDS_SUFFIX, "a") as f:
                f.write("".join(f"{pid}\n" for pid in new))

    loops: list = []
    #: Seconds from the crawl's start to the spider opening and to its first page (``crawl_start.py``).
    marks: dict[str, float] = {}

    def opened(spider: object) -> None:
        marks["opened"] = time.perf_counter() - started
        from twisted.internet import task  # built once the crawl's reactor is installed

        loops.append(task.LoopingCall(note_workers))
        loops[0].start(0.05)

    def closed(spider: object, reason: str) -> None:
        note_workers()
        if loops and loops[0].running:
            loops[0].stop()

    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    kept = ("finish_reason", "downloader/request_count", "downloader/response_count", "item_scraped_count")
    stats = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("neardup/") or k in kept}
    with open(out, "w") as f:
        json.dump(
            {
                "seconds": seconds,
                **marks,
                "crawler_cpu": usage.ru_utime + usage.ru_stime,
                "crawler_rss": usage.ru_maxrss * 1024,
                "items": items_path,
                "stats": {k: str(v) for k, v in stats.items()},
            },
            f,
        )


def run_crawl(base: str, paths: list[str], settings: dict, workdir: str) -> dict:
    return run_crawls(base, [paths], settings, workdir)[0]


def run_crawls(base: str, parts: list[list[str]], settings: dict, workdir: str) -> list[dict]:
    """One crawl per part of the paths, all at once, each in a process of its own; their results, with their
    workers' CPU and peak RSS (:class:`WorkerWatch`)."""
    started = []
    for paths in parts:
        out = tempfile.mktemp(dir=workdir, suffix=".json")
        process = multiprocessing.get_context("fork").Process(target=crawl_child, args=(base, paths, settings, out))
        process.start()
        started.append((process, out))
    watch = WorkerWatch([out for _, out in started])
    while any(process.is_alive() for process, _ in started):
        watch.read()
        time.sleep(WATCH_SECONDS)
    return [{**_finished(process, out), **watch.fields(out)} for process, out in started]


#: Beside a crawl's result file: the pids of its extraction workers, one a line, as the crawl meets them.
PIDS_SUFFIX = ".pids"
#: How often the bench's own process reads the workers' CPU and peak RSS.
WATCH_SECONDS = 0.05


class WorkerWatch:
    """The CPU seconds and peak RSS of each crawl's extraction workers, read from /proc every
    :data:`WATCH_SECONDS` by the bench's own process while the crawls run, so that the reading costs the
    crawler process (whose CPU the crawl is timed on) nothing. Each crawl names its workers in its pids file
    (:data:`PIDS_SUFFIX`); a worker's last reading stands after it ends (the pool recycles workers), and a
    pid is not read again once its process is gone (the kernel may give the number to another)."""

    def __init__(self, outs: list[str]) -> None:
        self.readings: dict[str, dict[int, tuple[float, int]]] = {out: {} for out in outs}
        self.gone: set[int] = set()

    def read(self) -> None:
        for out, readings in self.readings.items():
            try:
                with open(out + PIDS_SUFFIX) as f:
                    lines = f.read().split("\n")[:-1]  # a line still being written has no newline yet
            except FileNotFoundError:
                continue
            for pid in map(int, lines):
                if pid in self.gone:
                    continue
                reading = _proc_cpu_and_hwm(pid)
                if reading is None:
                    self.gone.add(pid)
                else:
                    readings[pid] = reading

    def fields(self, out: str) -> dict:
        """The result's worker fields: CPU seconds in all, the largest peak RSS, how many workers."""
        readings = self.readings[out].values()
        return {
            "worker_cpu": sum(cpu for cpu, _ in readings),
            "worker_rss": max((rss for _, rss in readings), default=0),
            "workers": len(readings),
        }


def _finished(process: multiprocessing.process.BaseProcess, out: str) -> dict:
    process.join()
    if process.exitcode != 0 or not os.path.exists(out):
        raise RuntimeError(f"crawl failed (exit code {process.exitcode})")
    with open(out) as f:
        return json.load(f)


def add_to_result(out: str, **fields: object) -> None:
    """Fields a probe's wrapped :func:`crawl_child` adds to the crawl's result at ``out``."""
    with open(out) as f:
        result = json.load(f)
    result.update(fields)
    with open(out, "w") as f:
        json.dump(result, f)


def collected(crawl: Callable[..., None]) -> Callable[..., None]:
    """``crawl_child`` that also writes the garbage collector's CPU seconds in the crawler process beside its
    result (``collector_cpu``, :class:`CollectorTimer`)."""

    def run(base: str, paths: list[str], settings: dict, out: str) -> None:
        with CollectorTimer() as collector:
            crawl(base, paths, settings, out)
        add_to_result(out, collector_cpu=sum(collector.spent))

    return run


@contextmanager
def wrapped_crawl_child(wrap: Callable[[Callable[..., None]], Callable[..., None]]) -> Iterator[None]:
    """Within the block, the crawls :func:`run_crawl` forks run ``wrap(crawl_child)``: a probe's crawler
    process, watched from inside."""
    global crawl_child
    crawl = crawl_child
    crawl_child = wrap(crawl)
    try:
        yield
    finally:
        crawl_child = crawl


def probe_crawl(
    dataset: str, order: str, settings: dict, wrap: Callable[[Callable[..., None]], Callable[..., None]]
) -> tuple[dict, float]:
    """One crawl of ``dataset`` in ``order`` as the timings run it (its own local site, ``settings`` over
    :func:`base_settings`), the crawler process running ``wrap(crawl_child)`` instead of :func:`crawl_child`,
    for a probe that watches the crawler from inside: the crawl's result, and the local server's CPU seconds.
    The crawl's folder (its store, its items) is removed afterwards."""
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
    paths = crawl_orders(manifest, [order])[order]
    base, server = serve(load_pages(dataset, manifest))
    workdir = tempfile.mkdtemp()
    try:
        with wrapped_crawl_child(wrap):
            result = run_crawl(base, paths, {**base_settings(workdir), **settings}, workdir)
        server_cpu = (_proc_cpu_and_hwm(server.pid) or (0.0, 0))[0]
    finally:
        server.terminate()
        shutil.rmtree(workdir, ignore_errors=True)
    return result, server_cpu


class CollectorWatch:
    """Called at the start and the stop of each of the garbage collector's collections in this process
    (:meth:`collection`, a ``gc.callbacks`` entry) while in a ``with`` block."""

    def __enter__(self: W) -> W:
        gc.callbacks.append(self.collection)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self.collection)

    def collection(self, phase: str, info: dict) -> None:
        raise NotImplementedError


W = TypeVar("W", bound=CollectorWatch)


class CollectorTimer(CollectorWatch):
    """The garbage collector's CPU time in this process by generation, while in a ``with`` block, and what
    it found: :meth:`summary`."""

    def __init__(self) -> None:
        self.spent = [0.0, 0.0, 0.0]
        self._began = 0.0

    def collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.spent[info["generation"]] += time.thread_time() - self._began

    def summary(self) -> dict:
        return {
            "cpu_seconds_by_generation": [round(t, 3) for t in self.spent],
            "collections_by_generation": [g["collections"] for g in gc.get_stats()],
            "objects_at_the_end": len(gc.get_objects()),
        }


def base_settings(workdir: str) -> dict:
    return {
        "ADDONS": {"scrapy_neardup.Addon": 300},
        "NEARDUP_ACTION": "tag",
        "LOG_LEVEL": "WARNING",
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "NEARDUP_STORE_URL": f"sqlite:///{tempfile.mktemp(dir=workdir, suffix='.sqlite3')}",
    }


def extraction_floor(pages: dict[str, bytes], base: str, limit: int) -> float:
    """CPU seconds per page of the workers' job (decode, extract, page text, fingerprints), in one process,
    over the pages with distinct bodies (a byte-identical copy reuses its first copy's job in a crawl:
    ``NEARDUP_BODY_CACHE_SIZE``)."""
    from scrapy_neardup import Config
    from scrapy_neardup.assembly import build_pipeline
    from scrapy_neardup.engine.extract import decode_html

    pipeline = build_pipeline(Config.from_settings({}))
    items = list(distinct_bodies(pages).items())[: limit or None]
    started = time.process_time()
    for path, body in items:
        pipeline.from_html(decode_html(body, "text/html; charset=utf-8"), base + path)
    return (time.process_time() - started) / len(items)


def distinct_bodies(pages: dict[str, bytes]) -> dict[str, bytes]:
    """The first page of each distinct body, in crawl order."""
    first: dict[bytes, str] = {}
    for path, body in pages.items():
        first.setdefault(body, path)
    return {path: body for body, path in first.items()}


#: The plugin off, and ``roundtrip_probe.py``'s middleware where the plugin's sits (variants ``roundtrip*``).
_ROUNDTRIP = {
    "ADDONS": {},
    "NEARDUP_ENABLED": False,
    "DOWNLOADER_MIDDLEWARES": {"roundtrip_probe.RoundTripMiddleware": 540},
}

#: ``--variants``: what a user can trade for speed, at the core count (name suffix: the settings changed);
#: ``nocache``: every byte-identical copy extracted again, as before ``NEARDUP_BODY_CACHE_SIZE``.
#: ``ext-<name>``: another main-content extractor (NEARDUP_EXTRACTOR); ``nolearn``: trafilatura on every
#: page, no learned templates (NEARDUP_LEARN_TEMPLATES); ``warm``: the defaults, on a store that holds the
#: selectors an earlier crawl of the site learned (and no fingerprint): a crawl that starts warm.
#: ``roundtrip``: the plugin off, each body sent to one of the workers and a 300-byte reply awaited by a
#: middleware of its own (``roundtrip_probe.py``, where the plugin's sits): the trip alone, its workers' CPU not read;
#: ``roundtrip5``: the same trip, each page's worker spending 5 ms of CPU on it (about what the plugin's spend);
#: ``roundtrip3``: 3 ms, a bound for a design that keeps only the trip on the reactor and spends about 3 ms a page
#: elsewhere (the decision in another process, leaner workers).
#: ``lessons3``: the learner as it was until 2026-11-28, three agreeing lessons and checks never under 1/32.
#: ``warm-noguard``: ``warm`` with the template guard off: the workers at their leanest without a change of the
#: crawler's path (selectors known from the start, no page text). ``hold4``: the plugin off, each response
#: held 4 ms on the reactor's timer by a middleware of ``roundtrip_probe.py``'s, no worker: waiting alone.
VARIANTS = {
    "noguard": {"NEARDUP_TEMPLATE_REPEATS": 0},
    "nolearn": {"NEARDUP_LEARN_TEMPLATES": False},
    "warm": {},
    "warm-noguard": {"NEARDUP_TEMPLATE_REPEATS": 0},
    "noextract": {"NEARDUP_EXTRACT": False},
    "nocache": {"NEARDUP_BODY_CACHE_SIZE": 0},
    "nice10": {"NEARDUP_WORKER_NICE": 10},
    "nice19": {"NEARDUP_WORKER_NICE": 19},
    "roundtrip": _ROUNDTRIP,
    "roundtrip5": {**_ROUNDTRIP, "ROUNDTRIP_WORKER_MS": 5},
    "roundtrip3": {**_ROUNDTRIP, "ROUNDTRIP_WORKER_MS": 3},
    "hold4": {**_ROUNDTRIP, "DOWNLOADER_MIDDLEWARES": {"roundtrip_probe.HoldMiddleware": 540}, "ROUNDTRIP_HOLD_MS": 4},
    "lessons3": {"NEARDUP_LEARN_LESSONS": 3, "NEARDUP_LEARN_CHECK_SHARE": 1 / 32},
    **{f"ext-{name}": {"NEARDUP_EXTRACTOR": name} for name in EXTRACTOR_NAMES if name != "trafilatura"},
}


def learned_selectors(base: str, paths: list[str], settings: dict, workdir: str) -> dict[str, str]:
    """The selectors one crawl of the site (untimed, at ``settings``, on a store of its own) left."""
    from scrapy_neardup.store import store_from_url

    url = base_settings(workdir)["NEARDUP_STORE_URL"]
    run_crawl(base, paths, {**settings, "NEARDUP_STORE_URL": url}, workdir)
    store = store_from_url(url)
    store.open_existing()
    try:
        return store.selectors.read()
    finally:
        store.close()


def with_selectors(url: str, selectors: dict[str, str]) -> None:
    """A new store at ``url`` holding ``selectors`` and nothing else (the crawl records its settings)."""
    from scrapy_neardup.store import store_from_url

    store = store_from_url(url)
    store.open({})
    try:
        store.selectors.save(selectors)
    finally:
        store.close()


def timing_row(results: list[dict], off_results: list[dict], pages: int) -> dict:
    """One crawl's timings over its rounds (:func:`run_crawl` results): its median wall time and each
    round's; T_on / T_off, the medians' ratio and each round's against the plugin-off crawl of the same round
    (``off_results``, in the same order: a round's crawls run one after another, so its ratio is the least
    moved by the machine's speed changing between rounds) with their median; and the crawler's and the
    workers' median CPU ms a page."""
    seconds = statistics.median(r["seconds"] for r in results)
    off_seconds = statistics.median(r["seconds"] for r in off_results)
    by_round = [r["seconds"] / o["seconds"] for r, o in zip(results, off_results)]
    return {
        "median_seconds": round(seconds, 2),
        "all_seconds": [round(r["seconds"], 2) for r in results],
        "t_on_over_t_off": round(seconds / off_seconds, 2),
        "t_on_over_t_off_by_round": [round(x, 2) for x in by_round],
        "t_on_over_t_off_paired": round(statistics.median(by_round), 2),
        "crawler_cpu_ms_per_page": round(1000 * statistics.median(r["crawler_cpu"] for r in results) / pages, 2),
        "worker_cpu_ms_per_page": round(1000 * statistics.median(r["worker_cpu"] for r in results) / pages, 2),
    }


def timings(args: argparse.Namespace, base: str, paths: list[str], pages: dict[str, bytes], workdir: str) -> dict:
    cores = os.cpu_count() or 1
    pools = args.pools if args.pools is not None else sorted({0, 1, 2, cores})
    runs: dict[str, list[dict]] = {"off": [], **{f"on_{p}": [] for p in pools}}
    if args.variants is not None:
        runs.update({f"on_{cores}_{name}": [] for name in args.variants or VARIANTS})
    learned: dict[str, str] | None = None  # the selectors a crawl of the site learned, for ``warm``
    for round_ in range(args.repeat):
        for name in runs:
            settings = {**base_settings(workdir), LAZY_START: args.start == "lazy"}
            settings["NEARDUP_ENABLED"] = name != "off"
            if name != "off":
                settings["NEARDUP_WORKERS"] = int(name.split("_")[1])
                settings["NEARDUP_WORKER_MAX_TASKS"] = 0  # no recycling: every worker's CPU is read at the end
                settings.update(VARIANTS.get(name.split("_")[-1], {}))
            if name.split("_")[-1].startswith("warm"):
                if learned is None:
                    learned = learned_selectors(base, paths, settings, workdir)
                    print(f"learning crawl: {len(learned)} selectors", file=sys.stderr, flush=True)
                with_selectors(settings["NEARDUP_STORE_URL"], learned)
            result = run_crawl(base, paths, settings, workdir)
            runs[name].append(result)
            print(f"round {round_ + 1} {name}: {result['seconds']:.2f} s", file=sys.stderr, flush=True)
    n = len(paths)
    off = statistics.median(r["seconds"] for r in runs["off"])
    rows = {}
    for name, results in runs.items():
        row = timing_row(results, runs["off"], n)
        rows[name] = {
            **row,
            "pages_per_sec": round(n / row["median_seconds"], 1),
            "crawler_peak_rss_mb": round(max(r["crawler_rss"] for r in results) / 2**20, 1),
            "worker_peak_rss_mb": round(max(r["worker_rss"] for r in results) / 2**20, 1),
            "checked": results[-1]["stats"].get("neardup/checked"),
            "reused": results[-1]["stats"].get("neardup/extract/reused", 0),
            "learned_last_round": {
                k.split("/")[-1]: int(v) for k, v in results[-1]["stats"].items() if k.startswith("neardup/learned/")
            },
        }
    extract_ms = 1000 * extraction_floor(pages, base, args.floor_pages)
    crawl_off_ms = rows["off"]["crawler_cpu_ms_per_page"]
    distinct = len(distinct_bodies(pages))
    floor_seconds = (n * crawl_off_ms + distinct * extract_ms) / 1000 / cores
    return {
        "pages": n,
        "cores": cores,
        "repeat": args.repeat,
        "start": args.start,
        "rows": rows,
        "floor": {
            "distinct_bodies": distinct,
            "extraction_cpu_ms_per_page": round(extract_ms, 2),
            "crawl_off_cpu_ms_per_page": crawl_off_ms,
            "extraction_ms_per_page_over_cores": round(extract_ms / cores, 2),
            "t_on_floor_seconds": round(floor_seconds, 2),
            "t_on_over_t_off_floor": round(max(floor_seconds, off) / off, 2),
        },
    }


def quality(
    args: argparse.Namespace, base: str, paths: list[str], pages: dict[str, bytes], manifest: list[dict], workdir: str
) -> dict:
    """Per crawl order, a crawl and ``dedup`` over the same pages in the same order, both scored."""
    return {
        "pages": len(paths),
        "processes": args.processes,
        "orders": {
            name: quality_in_order(args, base, order, pages, manifest, workdir)
            for name, order in crawl_orders(manifest, args.orders).items()
        },
    }


def named_settings(items: list[str]) -> dict[str, str]:
    """``-s NAME=VALUE`` options as settings (values as strings, as ``scrapy crawl -s`` gives them)."""
    return {name: value for name, _, value in (item.partition("=") for item in items)}


def _settings_with(args: argparse.Namespace, workdir: str, **extra: object) -> dict:
    return {**base_settings(workdir), "NEARDUP_ENABLED": True, **extra, **named_settings(args.setting)}


def quality_in_order(
    args: argparse.Namespace, base: str, paths: list[str], pages: dict[str, bytes], manifest: list[dict], workdir: str
) -> dict:
    by_path = {site_path(row["url"]): row["url"] for row in manifest}
    settings = _settings_with(args, workdir)
    cluster = None
    if args.redis_cluster:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from helpers.redis_cluster import RedisCluster

        cluster = RedisCluster(os.path.join(workdir, "cluster"), masters=args.redis_cluster).start()
        settings["NEARDUP_STORE_URL"] = cluster.url
    try:
        results = run_crawls(base, [paths[i :: args.processes] for i in range(args.processes)], settings, workdir)
    finally:
        if cluster is not None:
            cluster.stop()
    items = []
    for part in results:
        with open(part["items"]) as f:
            items += [json.loads(line) for line in f]
    result = {
        "seconds": max(r["seconds"] for r in results),
        "stats": results[0]["stats"] if len(results) == 1 else [r["stats"] for r in results],
    }
    crawl_score, predicted, wrong = scored_crawl(manifest, base, paths, settings, items)
    jsonl = os.path.join(workdir, "site.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for path in paths:
            f.write(json.dumps({"url": base + path, "html": decode_html(pages[path])}) + "\n")
    tsv = os.path.join(workdir, "pairs.tsv")
    subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", "dedup", jsonl, "-o", tsv], check=True, cwd=ROOT
    )
    with open(tsv, encoding="utf-8") as f:
        cli_pairs = [tuple(line.split("\t")[:2]) for line in f if line.strip() and not line.startswith("#")]
    cli_score = score(
        manifest, [(by_path[unquote(a[len(base) :])], by_path[unquote(b[len(base) :])]) for a, b in cli_pairs]
    )

    def row(s):  # type: ignore[no-untyped-def]
        return {"f1": round(s.f1, 4), "precision": round(s.precision, 4), "recall": round(s.recall, 4)}

    return {
        "store": "redis+cluster" if args.redis_cluster else settings.get("NEARDUP_STORE_URL") or "sqlite",
        "crawl": {
            **row(crawl_score),
            "pages_predicted_away": len(predicted),
            "predicted_wrongly": wrong[:20],
            "seconds": round(result["seconds"], 1),
            "stats": result["stats"],
        },
        "cli": row(cli_score),
        "f1_gap": round(cli_score.f1 - crawl_score.f1, 4),
    }


def scored_crawl(
    manifest: list[dict], base: str, paths: list[str], settings: dict, items: list[dict]
) -> tuple[Score, dict[str, str], list[str]]:
    """A crawl's items (its ``near_duplicate_of`` tags) scored by the set's labels; also the pages the URL rules
    kept from the crawl, with their predicted group, and those of them predicted wrongly."""
    by_path = {site_path(row["url"]): row["url"] for row in manifest}

    def page_of(url: str) -> str:
        return by_path[unquote(url[len(base) :])]

    pairs = [(by_path[i["path"]], page_of(i["near_duplicate_of"])) for i in items if i.get("near_duplicate_of")]
    # A page the URL rules kept from the crawl (skipped, or fetched as its group's page) has their prediction
    # for its verdict: a near-duplicate of that page. Wrong ones are skips of a page of another cluster.
    crawled = {i["path"] for i in items}
    predicted = predictions(settings, base, [p for p in paths if p not in crawled])
    known_group = {p: g for p, g in predicted.items() if unquote(g[len(base) :]) in by_path}
    pairs += [(by_path[p], page_of(group)) for p, group in known_group.items()]
    cluster_of = {row["url"]: row.get("cluster", row["url"]) for row in manifest}
    wrong = sorted(
        p
        for p, group in predicted.items()
        if p not in known_group or cluster_of[by_path[p]] != cluster_of[page_of(group)]
    )
    return score(manifest, pairs), predicted, wrong


def predictions(settings: dict, base: str, never_fetched: list[str]) -> dict[str, str]:
    """What the crawl's store (SQLite) predicts for the pages it never fetched: path -> the group's page URL,
    for those its host's rules rewrite into a page decided."""
    from scrapy_neardup.assembly import build_rule_book
    from scrapy_neardup.engine.urlrules import Learner
    from scrapy_neardup.settings import Config
    from scrapy_neardup.store import store_from_url
    from scrapy_neardup.store.base import group_of

    url = settings.get("NEARDUP_STORE_URL") or ""
    if not url.startswith("sqlite:") or not never_fetched:
        return {}
    store = store_from_url(url)
    store.open_existing()
    try:
        # What the crawl predicted when it kept each request from the fetch (its books), else what the rules
        # the store holds now predict.
        named = {p.url: p.group for books in store.books.read()[-1:] for p in books.predicted_pages}
        rules = Learner(build_rule_book(Config.from_settings({})), store.rules, lambda u: group_of(store, u))
        out = {}
        for path in never_fetched:
            if base + path in named:
                out[path] = named[base + path]
                continue
            prediction = rules.predict(base + path)
            if prediction is not None and prediction.decided and prediction.group:
                out[path] = prediction.group
        return out
    finally:
        store.close()


_HEAD_OPEN = re.compile(rb"<head\b[^>]*>", re.IGNORECASE)


def declaring(body: bytes, path: str) -> bytes:
    """The page with its ``<link rel="canonical">`` pointing to ``path`` (replaced, or added to its head)."""
    head = body[:CANONICAL_SCAN_CHARS]
    for tag in _LINK_TAG.finditer(head):
        if b"canonical" in tag.group(0).lower() and b"rel" in tag.group(0).lower():
            local = _HREF.sub(lambda m: m.group(1) + b'"' + path.encode() + b'"', tag.group(0), 1)
            return body[: tag.start()] + local + body[tag.end() :]
    link = b'<link rel="canonical" href="' + path.encode() + b'">'
    found = _HEAD_OPEN.search(head)
    return body[: found.end()] + link + body[found.end() :] if found else link + body


def alias_site(dataset: str, manifest: list[dict]) -> tuple[dict[str, bytes], dict[str, str], dict[str, str]]:
    """Pages (path → body), each path's group (its original's path) and its kind (original, tracking, amp,
    print, noise)."""
    by_cluster: dict[str, list[dict]] = {}
    for row in manifest:
        by_cluster.setdefault(row["cluster"], []).append(row)
    pages: dict[str, bytes] = {}
    group: dict[str, str] = {}
    kind: dict[str, str] = {}
    for rows in by_cluster.values():
        original = next((r for r in rows if r["kind"] == "original"), None)
        if original is None:
            continue
        home = site_path(original["url"])
        body = read_page(os.path.join(dataset, original["file"]))
        own = declaring(body, home)
        tracking = home + ("&" if "?" in home else "?") + "utm_source=feed"
        copies = {home: (own, "original"), tracking: (own, "tracking"), "/amp" + home: (own, "amp")}
        for row in rows:
            if row["kind"] in ("print", "noise"):
                path = site_path(row["url"]) if row["kind"] == "noise" else "/print" + home
                copies[path] = (declaring(read_page(os.path.join(dataset, row["file"])), home), row["kind"])
        for path, (page, what) in copies.items():
            pages[path] = page
            group[path] = home
            kind[path] = what
    return pages, group, kind


def aliases(args: argparse.Namespace, workdir: str) -> dict:
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    pages, group, kind = alias_site(args.dataset, manifest)
    base, server = serve(pages)
    originals = set(group.values())
    copies = [p for p in pages if p not in originals]
    orders = {
        "copies-first": copies + sorted(originals),
        "shuffled-1": random.Random(1).sample(list(pages), len(pages)),
    }
    out: dict = {"pages": len(pages), "groups": len(originals)}
    try:
        for name, order in orders.items():
            store = f"sqlite:///{os.path.join(workdir, name + '.sqlite3')}"
            settings = _settings_with(args, workdir, NEARDUP_ACTION="drop", NEARDUP_STORE_URL=store)
            emitted = []
            for crawl_paths in (order, list(reversed(order))):
                result = run_crawl(base, crawl_paths, settings, workdir)
                with open(result["items"]) as f:
                    emitted.append([json.loads(line)["path"] for line in f])
            first = emitted[0]
            per_group: dict[str, list[str]] = {}
            for path in first:
                per_group.setdefault(group.get(path, "?"), []).append(path)
            out[name] = {
                "emitted": len(first),
                "emitted_again": len(emitted[1]),
                "same_on_recrawl": sorted(first) == sorted(emitted[1]),
                "groups_with_one_page": sum(1 for g in originals if len(per_group.get(g, ())) == 1),
                "groups_with_more": sum(1 for g in originals if len(per_group.get(g, ())) > 1),
                "groups_with_none": sum(1 for g in originals if not per_group.get(g)),
                "one_page_and_it_is_the_original": sum(1 for g in originals if per_group.get(g) == [g]),
                "extra_pages_by_kind": dict(
                    sorted(
                        Counter(
                            kind[p] for g in originals for p in per_group.get(g, []) if len(per_group[g]) > 1 and p != g
                        ).items()
                    )
                ),
            }
            out[name]["share_with_at_most_one"] = round(
                (out[name]["groups_with_one_page"] + out[name]["groups_with_none"]) / len(originals), 4
            )
            print(name, out[name], file=sys.stderr, flush=True)
    finally:
        server.terminate()
    return out


def recrawl(args: argparse.Namespace, base: str, paths: list[str], manifest: list[dict], workdir: str) -> dict:
    """Drop mode, copies first, twice on one store (the second crawl in reverse order): what each emitted."""
    server = None
    if args.redis:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from helpers.redis_server import RedisServer

        server = RedisServer(os.path.join(workdir, "redis"), persistent=True).start()
    store = server.url if server is not None else f"sqlite:///{os.path.join(workdir, 'recrawl.sqlite3')}"
    settings = _settings_with(args, workdir, NEARDUP_ACTION="drop", NEARDUP_STORE_URL=store)
    order = crawl_orders(manifest, ["copies-first"])["copies-first"]
    cluster_of = {site_path(r["url"]): r["cluster"] for r in manifest}
    emitted = []
    repointed = []
    try:
        for n, crawl_paths in enumerate((order, list(reversed(order)))):
            results = run_crawls(
                base, [crawl_paths[i :: args.processes] for i in range(args.processes)], settings, workdir
            )
            got: list[str] = []
            for part in results:
                with open(part["items"]) as f:
                    got += [json.loads(line)["path"] for line in f]
            emitted.append(got)
            repointed.append(sum(int(part["stats"].get("neardup/repointed", 0)) for part in results))
    finally:
        if server is not None:
            server.stop()
    first, second = emitted
    per_cluster: dict[str, int] = {}
    for path in first:
        per_cluster[cluster_of[path]] = per_cluster.get(cluster_of[path], 0) + 1
    clusters = {r["cluster"] for r in manifest}
    return {
        "pages": len(paths),
        "processes": args.processes,
        "store": "redis" if server is not None else "sqlite",
        "first_emitted": len(first),
        "second_emitted": len(second),
        "same": sorted(first) == sorted(second),
        "emitted_twice_in_a_crawl": len(first) - len(set(first)),
        "only_in_first": len(set(first) - set(second)),
        "only_in_second": len(set(second) - set(first)),
        "repointed_in_first": repointed[0],
        "repointed_in_second": repointed[1],
        "clusters": len(clusters),
        "clusters_with_one_page_emitted": sum(1 for c in clusters if per_cluster.get(c, 0) == 1),
        "clusters_with_none": sum(1 for c in clusters if per_cluster.get(c, 0) == 0),
    }


def stability(args: argparse.Namespace, base: str, paths: list[str], workdir: str) -> dict:
    outcomes = []
    for i in range(args.stability):
        settings = base_settings(workdir)
        settings["NEARDUP_ENABLED"] = True
        try:
            result = run_crawl(base, paths, settings, workdir)
            stats = result["stats"]
            outcomes.append(
                {
                    "finish_reason": stats.get("finish_reason"),
                    "worker_lost": int(stats.get("neardup/skipped/worker_lost", 0)),
                    "checked": int(stats.get("neardup/checked", 0)),
                    "seconds": round(result["seconds"], 1),
                }
            )
        except RuntimeError as exc:
            outcomes.append({"error": str(exc)})
        print(f"crawl {i + 1}: {outcomes[-1]}", file=sys.stderr, flush=True)
    ok = [o for o in outcomes if o.get("finish_reason") == "finished" and o.get("worker_lost") == 0]
    return {
        "crawls": len(outcomes),
        "finished_without_loss": len(ok),
        "pages": len(paths),
        "checked": sorted({o.get("checked") for o in outcomes}),
        "outcomes_not_ok": [o for o in outcomes if o not in ok],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of alternating crawls (medians over them)")
    parser.add_argument("--pools", type=int, nargs="*", help="pool sizes to time (default 0, 1, 2, the cores)")
    parser.add_argument("--limit", type=int, help="only the first N pages")
    parser.add_argument(
        "--floor-pages",
        type=int,
        default=0,
        help="pages timed alone for the floor (default 0: every page the crawl fetches)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=sorted(VARIANTS),
        default=None,
        help="also time these variants at the core count (no name: all): the template guard "
        "off, main-content extraction off, the body cache off, another extractor (ext-NAME), no learned "
        "templates (nolearn), a store that starts with the selectors a crawl of the site learned (warm; "
        "warm-noguard: and the guard off), the trip of each body to a worker and back alone, the plugin off "
        "(roundtrip; roundtrip5: 5 ms of the worker's CPU a page), each response held 4 ms and no worker "
        "(hold4), the learner's former defaults (lessons3: three lessons, checks down to 1/32)",
    )
    parser.add_argument(
        "--start",
        choices=("eager", "lazy"),
        default="eager",
        help="the timings' start requests: read ahead into the scheduler as Scrapy does by default (eager), or "
        "each one yielded when the engine can send it (lazy: both crawls hold the same few requests)",
    )
    parser.add_argument("--quality", action="store_true", help="score a crawl and the CLI on the same pages")
    parser.add_argument(
        "--orders",
        nargs="+",
        default=["manifest", "copies-first", "shuffled-1", "shuffled-2", "shuffled-3"],
        help="--quality: crawl orders (manifest, copies-first, shuffled-N)",
    )
    parser.add_argument(
        "--order",
        default="manifest",
        help="the crawl order of the timings (manifest, copies-first, shuffled-N; on the template-rich set the "
        "manifest order gives each template's pages in one burst, a shuffled one spreads them as a long crawl does)",
    )
    parser.add_argument("--recrawl", action="store_true", help="drop mode, crawled twice on one store")
    parser.add_argument("--aliases", action="store_true", help="a site of aliases declaring their originals")
    parser.add_argument("--redis", action="store_true", help="--recrawl: a real redis-server as the store")
    parser.add_argument("--stability", type=int, default=0, metavar="N", help="N crawls in a row")
    parser.add_argument("--processes", type=int, default=1, help="--quality: crawls at once, sharing the store")
    parser.add_argument(
        "--redis-cluster",
        type=int,
        default=0,
        metavar="M",
        help="--quality: the crawls' store is a real Redis Cluster of M masters",
    )
    parser.add_argument(
        "-s",
        dest="setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Scrapy setting for the --quality crawl",
    )
    args = parser.parse_args()
    if args.aliases:
        workdir = tempfile.mkdtemp(prefix="bench-crawl-")
        try:
            out = aliases(args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(json.dumps({"command": " ".join(["bench/bench_crawl.py", *sys.argv[1:]]), **out}, indent=1))
        return 0
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    if args.limit:
        manifest = manifest[: args.limit]
    pages = load_pages(args.dataset, manifest)
    paths = crawl_orders(manifest, [args.order])[args.order]
    base, server = serve(pages)
    workdir = tempfile.mkdtemp(prefix="bench-crawl-")
    try:
        if args.quality:
            out = quality(args, base, paths, pages, manifest, workdir)
        elif args.recrawl:
            out = recrawl(args, base, paths, manifest, workdir)
        elif args.stability:
            out = stability(args, base, paths, workdir)
        else:
            out = timings(args, base, paths, pages, workdir)
    finally:
        server.terminate()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"command": " ".join(["bench/bench_crawl.py", *sys.argv[1:]]), **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
