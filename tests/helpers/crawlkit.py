"""Helpers for end-to-end tests: real ``scrapy crawl`` processes against HTTP servers on 127.0.0.1."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from scrapy import signals

from . import ROOT, SPIDERS, TESTS

EXAMPLE = os.path.join(ROOT, "example_project")


class StatsToFile:
    """Test-only extension: writes the crawl's final stats as JSON to the ``TEST_STATS_FILE`` setting, when
    the spider closes and again when the engine has stopped (after every ``spider_closed`` handler, the
    plugin's included, has finished; a crawl stopped while opening may end without that signal)."""

    def __init__(self, crawler):
        self.crawler = crawler
        self.path = crawler.settings.get("TEST_STATS_FILE")
        crawler.signals.connect(self.closed, signal=signals.spider_closed)
        crawler.signals.connect(self.closed, signal=signals.engine_stopped)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def closed(self, *args, **kwargs):
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.crawler.stats.get_stats(), f, default=str)


@dataclass
class CrawlResult:
    returncode: int
    stats: dict
    items: list
    log: str

    def neardup_stats(self):
        return {k: v for k, v in self.stats.items() if k.startswith("neardup/")}

    def refused_at_start(self, reason="neardup_store_error"):
        """Whether the crawl failed its start-up on the store, as a bad setting does: one ERROR line of the
        plugin's naming ``reason``, no traceback, no item; exit status 1 and no spider opened, or, on a Scrapy
        before 2.15 (which exits 0 for a component that fails to start), the spider closed as it opened with
        ``reason`` as its finish reason and no page checked."""
        import scrapy

        errors = [line for line in self.log.splitlines() if " ERROR: scrapy-neardup:" in line]
        said = (
            len(errors) == 1
            and f"the crawl cannot start ({reason})" in errors[0]
            and "Traceback" not in self.log
            and not self.items
        )
        if tuple(int(p) for p in scrapy.__version__.split(".")[:2]) >= (2, 15):
            return said and self.returncode == 1 and "Spider opened" not in self.log and not self.stats
        return said and self.stats.get("finish_reason") == reason and "neardup/checked" not in self.stats


def scrapy_command(args, tmp_path, settings=None, name="crawl"):
    """The command line, environment and output files of a ``scrapy`` run with the test extensions."""
    stats_file = tmp_path / f"{name}-stats.json"
    items_file = tmp_path / f"{name}-items.jsonl"
    all_settings = {
        "EXTENSIONS": json.dumps({"helpers.crawlkit.StatsToFile": 0}),
        "TEST_STATS_FILE": str(stats_file),
        "LOG_LEVEL": "DEBUG",
        **(settings or {}),
    }
    cmd = [sys.executable, "-m", "scrapy", *args, "-O", f"{items_file}:jsonlines"]
    for key, value in all_settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([TESTS, ROOT, env.get("PYTHONPATH", "")])
    return cmd, env, stats_file, items_file


def read_result(returncode, stats_file, items_file, log):
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    items = [json.loads(line) for line in items_file.read_text().splitlines()] if items_file.exists() else []
    return CrawlResult(returncode, stats, items, log)


def run_scrapy(args, tmp_path, settings=None, cwd=EXAMPLE, timeout=120, name="crawl", pythonpath=()):
    """A ``scrapy`` run; ``pythonpath``: folders put first on the crawl's import path."""
    cmd, env, stats_file, items_file = scrapy_command(args, tmp_path, settings, name)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env["PYTHONPATH"]])
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)


class ServerThread:
    """Runs an ``http.server`` server in a thread for a ``with`` block."""

    def __init__(self, server):
        self.server = server
        self.pages = getattr(server, "pages", None)
        self.url = f"http://{server.server_address[0]}:{server.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class WorkerWatch:
    """Test-only extension: records the extraction workers' pids (and their parent, the fork server) to
    ``TEST_PIDS_FILE`` and, with ``TEST_KILL_URL_SUFFIX``, SIGKILLs the worker process that holds the page
    whose URL ends so, while it is extracting it (with ``TEST_KILL_WHEN_WAITED``, once a byte-identical copy
    waits on that job).

    It finds that worker in the pool's table of busy workers (``ExtractionPool.running``), which is
    exactly the information a precise kill needs."""

    def __init__(self, crawler):
        self.crawler = crawler
        self.pids_file = crawler.settings.get("TEST_PIDS_FILE")
        self.kill_suffix = crawler.settings.get("TEST_KILL_URL_SUFFIX")
        self.pids = set()
        self.parents = set()
        self.killed = []
        self.reader = None
        self.loop = None
        crawler.signals.connect(self.opened, signal=signals.spider_opened)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def opened(self, spider):
        from twisted.internet import task

        self.loop = task.LoopingCall(self.tick)
        self.loop.start(0.01)

    def tick(self):
        import signal as _signal

        from scrapy_neardup.crawl.service import NearDupService

        extraction = NearDupService.for_crawler(self.crawler).preparer._extraction
        if extraction is None:
            return
        self.reader = type(extraction._io).__name__  # who reads the workers' results
        new = [pid for pid in extraction.pids() if pid not in self.pids]
        for pid in new:
            self.pids.add(pid)
            self.parents.add(_ppid(pid))
        if new:
            self.write()
        if not self.kill_suffix or self.killed:
            return
        waited = self.crawler.settings.getbool("TEST_KILL_WHEN_WAITED")
        for pid, seconds, (_, args) in extraction.running():
            if waited and not self.waited_on(extraction, pid):
                continue
            if len(args) > 1 and str(args[1]).endswith(self.kill_suffix) and seconds > 0.05:
                os.kill(pid, _signal.SIGKILL)  # while it is extracting that page
                self.killed.append(pid)

    @staticmethod
    def waited_on(extraction, pid):
        """Whether a byte-identical copy waits on the page this worker holds (``TEST_KILL_WHEN_WAITED``):
        its job then has three callbacks, the body cache's, its page's and the copy's."""
        with extraction._lock:
            page = next((w.page for w in extraction._workers if w.process.pid == pid), None)
        return page is not None and len(page._done_callbacks) >= 3

    def closed(self, spider, reason):
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        self.tick()
        self.write()

    def write(self):
        if self.pids_file:
            tmp = self.pids_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(
                    {
                        "workers": sorted(self.pids),
                        "parents": sorted(p for p in self.parents if p),
                        "killed": self.killed,
                        "crawler": os.getpid(),
                        "reader": self.reader,
                    },
                    f,
                )
            os.replace(tmp, self.pids_file)


class ThreadReader:
    """Test-only extension: the crawl reads its workers' results on the pool's own thread, as it does where
    pipes are not file descriptors the reactor can watch (Windows), instead of on the reactor."""

    @classmethod
    def from_crawler(cls, crawler):
        from scrapy_neardup.crawl import preparer

        preparer.pool_reader = lambda: None  # before the spider opens and the service starts its pool
        return cls()


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def alive(pid):
    """True while a process with this pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class LoggedPages(dict):
    """Pages to serve (:func:`pages_server`), each request counted: the server's log, ``requests`` (path →
    count) and ``order`` (the paths in the order they were asked)."""

    def __init__(self, pages):
        super().__init__(pages)
        self.requests = collections.Counter()
        self.order = []
        self._lock = threading.Lock()

    def get(self, path, default=None):
        with self._lock:
            self.requests[path] += 1
            self.order.append(path)
        return super().get(path, default)

    def clear_log(self):
        with self._lock:
            self.requests.clear()
            self.order.clear()


def pages_server(pages, host="127.0.0.1"):
    """An HTTP server on ``host`` (any loopback address) serving ``pages``: path → HTML (served as UTF-8
    text/html), or path → ``(body bytes, {header: value}[, status])`` for a page with headers (and a status)
    of its own, or path → a function that returns either when the page is requested (:func:`gated`). Its
    listen backlog is raised:
    ``http.server``'s default of 5 drops connections at crawl concurrency."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            page = pages.get(self.path)
            if callable(page):
                page = page()
            if page is None:
                self.send_error(404)
                return
            body, headers, *status = (page.encode(), {}) if isinstance(page, str) else page
            self.send_response(status[0] if status else 200)
            for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256
        daemon_threads = True

    server = Server((host, 0), Handler)
    server.pages = pages  # what it serves (a LoggedPages: with its log)
    return server


def gated(page, gate, timeout=60.0):
    """``page``, answered only once the ``threading.Event`` ``gate`` is set (or after ``timeout``): a crawl
    that requests it cannot finish before the test lets it, however fast the machine."""

    def answer():
        gate.wait(timeout)
        return page

    return answer


def held(page, seconds):
    """``page``, answered ``seconds`` after it is requested (the server answers other requests meanwhile): a
    request that stays in flight that long while the rest of the crawl goes on."""

    def answer():
        time.sleep(seconds)
        return page

    return answer


SPIDER_PATHS = os.path.join(SPIDERS, "paths.py")
SPIDER_FOLLOW = os.path.join(SPIDERS, "follow.py")


def site_crawl_command(tmp_path, base, settings=None, name="crawl", items="/"):
    """``scrapy runspider`` of the whole-site spider from ``base``'s ``/``, with the plugin on at its defaults
    (drop mode, a SQLite store in ``tmp_path``) but for ``settings``; an item per page under ``items``."""
    all_settings = {
        "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
        "NEARDUP_ENABLED": "True",
        "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/store.sqlite3",
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        **(settings or {}),
    }
    args = ["runspider", SPIDER_FOLLOW, "-a", f"base={base}", "-a", f"items={items}"]
    return scrapy_command(args, tmp_path, all_settings, name)


def site_crawl(tmp_path, base, settings=None, name="crawl", items="/", timeout=180):
    """A finished whole-site crawl (:func:`site_crawl_command`), checked to have ended cleanly."""
    cmd, env, stats_file, items_file = site_crawl_command(tmp_path, base, settings, name, items)
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    return result


def paths_crawl_command(tmp_path, base, pages, settings=None, name="crawl", spider_args=()):
    """``scrapy runspider`` of the paths spider over ``pages``, with the plugin on (drop mode, a SQLite
    store in ``tmp_path``, FIFO order); ``spider_args``: more ``-a NAME=VALUE`` of the spider's."""
    paths_file = tmp_path / f"{name}-paths.txt"
    paths_file.write_text("\n".join(pages))
    all_settings = {
        "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
        "NEARDUP_ENABLED": "True",
        "NEARDUP_ACTION": "drop",
        "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/store.sqlite3",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "TELNETCONSOLE_ENABLED": "False",
        **(settings or {}),
    }
    return scrapy_command(
        ["runspider", SPIDER_PATHS, "-a", f"base={base}", "-a", f"paths_file={paths_file}"]
        + [part for arg in spider_args for part in ("-a", arg)],
        tmp_path,
        all_settings,
        name,
    )


def crawl_pages(tmp_path, pages, settings=None, name="crawl", timeout=120):
    """Serve ``pages`` and crawl them all; the finished crawl's result."""
    with ServerThread(pages_server(pages)) as server:
        cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, server.url, pages, settings, name)
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout)
    return read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)


def segfault(*args):
    """A worker task that dies of a real segmentation fault (reads address 0), as a parser fault would."""
    import ctypes

    return ctypes.string_at(0)


def digests(*args):
    """A worker task: each argument's type, and the SHA-256 of each bytes argument (what arrived)."""
    import hashlib

    return [(type(a).__name__, hashlib.sha256(a).hexdigest() if isinstance(a, bytes) else a) for a in args]


def tokenizer_tables_built():
    """A worker task: whether the tokenizer's code-point table was built in this process before the task."""
    from scrapy_neardup.engine import text

    return text._bmp_table is not None


def sleepy(seconds):
    """A worker task that takes ``seconds``."""
    time.sleep(seconds)
    return seconds


def assert_no_process_left(info, within=10.0):
    """Every worker and the fork server that started them have ended (waiting a little: after the crawler
    dies, the kernel kills its workers asynchronously)."""
    deadline = time.monotonic() + within
    left = [p for p in info["workers"] + info["parents"] if p != info["crawler"]]
    while time.monotonic() < deadline:
        left = [p for p in left if alive(p)]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes still running after the crawl: {left}")


def wait_until(condition, timeout=60.0, what="the condition"):
    """Poll ``condition`` until it is true: faults are injected on an event of the crawl (pages filed),
    not after a guessed delay."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - not ready yet (a file not created, a server starting)
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def crawl_tagged(tmp_path, pages, settings=None, name="crawl", timeout=180, preexec=None, paths=None):
    """Serve ``pages`` (see :func:`pages_server`) and crawl them in tag mode, or only ``paths`` of them (the
    rest served for the requests the crawl makes itself: declared pages, redirects); the result."""
    settings = {"NEARDUP_ACTION": "tag", "LOG_LEVEL": "INFO", **(settings or {})}
    crawled = list(pages) if paths is None else list(paths)
    with ServerThread(pages_server(pages)) as running:
        cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, running.url, crawled, settings, name)
        proc = subprocess.run(
            cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec
        )
    return read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)


def books(result) -> dict[str, int]:
    stats = result.neardup_stats()
    skipped = sum(v for k, v in stats.items() if k.startswith("neardup/skipped/"))
    return {
        "checked": stats.get("neardup/checked", 0),
        "skipped": skipped,
        "store_error": stats.get("neardup/store_error", 0),
        "unsaved": stats.get("neardup/unsaved", 0),
    }
