"""Extraction and fingerprinting in worker processes, so that a native crash costs a page, not a crawl.

trafilatura and lxml are C code: a parser fault (trafilatura's extraction on several threads of one
process aborted a crawl with a glibc ``double free``, see docs/reference.md) kills the process it happens
in. Here it happens in a worker: the crawler, its store and its decisions live in another process.
Extraction is also CPU work under the GIL; a pool of processes uses every core.

The pool is pebble's :class:`~pebble.ProcessPool`: each task is acknowledged by the worker that takes it,
so a worker that dies (SIGSEGV, SIGABRT, SIGKILL, the kernel's out-of-memory killer) fails exactly the
page it held, with :class:`~pebble.ProcessExpired`, and is replaced; a task past its timeout has its
worker stopped and replaced; ``max_tasks`` recycles each worker after so many pages, which bounds the
memory a long crawl lets a worker grow to. What crosses to a worker is a page's body, URL and
``Content-Type``; what comes back is :meth:`Prepared.to_wire <scrapy_neardup.engine.prepare.Prepared.to_wire>`.

Workers start from a fork server (a clean single-threaded process started once, with the extraction
modules imported), never by forking the crawler, whose threads may hold locks at fork time. Each worker
ignores SIGINT (Ctrl-C reaches the whole process group; the crawler decides what it means) and asks the
kernel to kill it when its parent dies, so no worker outlives a crawler that was killed.

Nothing here imports Scrapy.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.extract import decode_html, quiet_trafilatura

if TYPE_CHECKING:
    from .._config import Config
    from ..engine.prepare import DocumentPipeline, Prepared

logger = logging.getLogger("scrapy_neardup")

#: How long closing the pool waits for its worker processes to end before killing them.
CLOSE_WAIT_SECS = 5.0
#: Pages in flight and none finished for this long: the watchdog checks the workers' shared pipe.
STALL_CHECK_SECS = 5.0
#: How long that check waits for the pipe's locks, which a healthy worker holds for milliseconds.
LOCK_WAIT_SECS = 5.0
#: How often the watchdog looks.
WATCH_EVERY_SECS = 1.0

_pipeline: DocumentPipeline | None = None


class WorkerLost(Exception):
    """The worker process holding a page died (its exit code or signal is in the message)."""


class WorkerTimeout(Exception):
    """A page took longer than the timeout; its worker was stopped and replaced."""


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent ends (no orphans after a hard kill)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the pool's own cleanup still runs
        pass


def init_worker(config: Config) -> None:
    """Worker start: build the stateless document pipeline once."""
    global _pipeline
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    quiet_trafilatura()
    _pipeline = config.build_pipeline()


def prepare_html(pipeline: DocumentPipeline, body: bytes, url: str, content_type: str | None) -> Prepared:
    """A page's body to what the decision needs, with the time the whole job took."""
    started = time.perf_counter()
    prepared = pipeline.from_html(decode_html(body, content_type), url)
    return replace(prepared, work_seconds=time.perf_counter() - started)


def prepare_text(pipeline: DocumentPipeline, text: str) -> Prepared:
    """An item's text to what the decision needs."""
    return pipeline.from_text(text)


def analyze_html(body: bytes, url: str, content_type: str | None) -> tuple:  # type: ignore[type-arg]
    """Worker task: :func:`prepare_html` in this worker, as plain values (:meth:`Prepared.to_wire`)."""
    assert _pipeline is not None, "init_worker was not called"
    return prepare_html(_pipeline, body, url, content_type).to_wire()


def analyze_text(text: str) -> tuple:  # type: ignore[type-arg]
    """Worker task: :func:`prepare_text` in this worker, as plain values."""
    assert _pipeline is not None, "init_worker was not called"
    return prepare_text(_pipeline, text).to_wire()


#: Each worker task and the function that does its work in the calling process (``NEARDUP_WORKERS = 0``).
IN_PROCESS: dict[Callable[..., Any], Callable[..., Prepared]] = {analyze_html: prepare_html,
                                                                 analyze_text: prepare_text}


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # Imported once in the fork server, shared by every worker forked from it.
        ctx.set_forkserver_preload(["scrapy_neardup.crawl.workers", "scrapy_neardup.engine.prepare", "trafilatura"])
        return ctx
    return multiprocessing.get_context("spawn")


class ExtractionPool:
    """A pool of ``workers`` processes running :func:`analyze_html` and :func:`analyze_text`.

    :meth:`submit` returns a :class:`concurrent.futures.Future` of the wire tuple, which fails with
    :class:`WorkerLost` or :class:`WorkerTimeout`. ``timeout`` is per page, in seconds (``None``: none);
    ``max_tasks`` recycles a worker after that many pages (0: never).

    Two failures of pebble's pool are handled here, so that no page ever waits forever:

    * pebble declares its pool *broken* when a worker dies while no page at all is in flight; the next
      :meth:`submit` then starts a new pool.
    * pebble's workers share one pipe, guarded by two process-shared locks. pebble only ever stops a worker
      when it can take both, but a worker killed from outside (the out-of-memory killer, a signal) while it
      holds one leaves it held for good: the other workers block, pebble can no longer time pages out, and
      the pages in flight would never finish. A watchdog thread notices when pages are in flight and none
      has finished for ``STALL_CHECK_SECS``; it then tries the locks, which a healthy worker holds for
      milliseconds. If they cannot be had within ``LOCK_WAIT_SECS`` the pool is *wedged*: every page in
      flight fails with :class:`WorkerLost` and a new pool (new pipe, new locks) takes over. Such a kill
      therefore costs the pages in flight and about ten seconds, not the crawl.
    """

    def __init__(self, config: Config, workers: int, timeout: float | None = None, max_tasks: int = 0) -> None:
        if workers < 1:
            raise ValueError("an extraction pool needs at least one worker")
        self.config = config
        self.workers = workers
        self.timeout = timeout
        self.max_tasks = max_tasks
        self.restarts = 0  # pools replaced, broken or wedged
        self.wedged = 0
        self._lock = threading.Lock()
        self._pool: Any = None
        self._closed = False
        self._inflight: dict[Future, Any] = {}  # type: ignore[type-arg]  # page's future -> the pool it went to
        self._last_progress = time.monotonic()
        self._delivering = 0  # results being handed to their callbacks right now
        self._stop_watching = threading.Event()
        self._watchdog: threading.Thread | None = None

    def start(self) -> None:
        self._pool = self._new_pool()
        self._watchdog = threading.Thread(target=self._watch, name="scrapy-neardup-watchdog", daemon=True)
        self._watchdog.start()

    def _new_pool(self) -> Any:
        from pebble import ProcessPool

        return ProcessPool(self.workers, max_tasks=self.max_tasks, initializer=init_worker,
                           initargs=(self.config,), context=_context())

    def submit(self, fn: Any, *args: Any) -> Future:  # type: ignore[type-arg]
        outer: Future = Future()  # type: ignore[type-arg]
        with self._lock:
            if self._closed or self._pool is None:
                raise RuntimeError("the extraction pool is closed")
            try:
                inner = self._pool.schedule(fn, args, timeout=self.timeout)
            except RuntimeError:  # pebble: the pool is broken; start a fresh one
                logger.warning("scrapy-neardup: the extraction pool broke (a worker died while idle); "
                               "starting a new one")
                self._swap_pool()
                inner = self._pool.schedule(fn, args, timeout=self.timeout)
            if not self._inflight:
                self._last_progress = time.monotonic()
            self._inflight[outer] = self._pool
        inner.add_done_callback(lambda done: self._settle(done, outer))
        return outer

    def _swap_pool(self) -> Any:
        """Under the lock: a new pool in place of the current one, which is disposed of in the background
        (stopping a broken pool can take seconds)."""
        old, self._pool = self._pool, self._new_pool()
        self.restarts += 1
        if old is not None:
            threading.Thread(target=_dispose, args=(old,), name="scrapy-neardup-dispose", daemon=True).start()
        return old

    def _settle(self, inner: Future, outer: Future) -> None:  # type: ignore[type-arg]
        from concurrent.futures import CancelledError
        from concurrent.futures import TimeoutError as FutureTimeout

        from pebble import ProcessExpired

        with self._lock:
            self._inflight.pop(outer, None)
            self._last_progress = time.monotonic()
        try:
            result = inner.result()
        except ProcessExpired as exc:
            code = exc.exitcode
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
            _fail(outer, WorkerLost(f"its extraction worker died ({how})"))
        except FutureTimeout:
            _fail(outer, WorkerTimeout("extraction took longer than NEARDUP_WORKER_TIMEOUT"))
        except CancelledError:
            _fail(outer, WorkerLost("the extraction pool was stopped"))
        except Exception as exc:  # noqa: BLE001 - BrokenProcessPool, and the task's own errors
            if type(exc).__name__ == "BrokenProcessPool":
                _fail(outer, WorkerLost(f"the extraction pool broke ({exc})"))
            else:
                _fail(outer, exc)
        else:
            # The page's callbacks run here, on pebble's result thread (for a local store, the decision
            # itself): time spent in them is the caller's, not a stalled pool.
            with self._lock:
                self._delivering += 1
            try:
                outer.set_result(result)
            except InvalidStateError:  # already failed by the watchdog
                pass
            finally:
                with self._lock:
                    self._delivering -= 1
                    self._last_progress = time.monotonic()

    def _watch(self) -> None:
        while not self._stop_watching.wait(WATCH_EVERY_SECS):
            with self._lock:
                pool = self._pool
                stalled = (bool(self._inflight) and not self._delivering
                           and time.monotonic() - self._last_progress > STALL_CHECK_SECS)
            if not stalled or pool is None or _channel_free(pool):
                if stalled:
                    with self._lock:  # slow pages, not a wedge: look again after another quiet spell
                        self._last_progress = time.monotonic()
                continue
            with self._lock:
                if self._closed or self._pool is not pool:
                    continue
                lost = [page for page, went_to in self._inflight.items() if went_to is pool]
                for page in lost:
                    del self._inflight[page]
                self._swap_pool()
                self.wedged += 1
                self._last_progress = time.monotonic()
            logger.error("scrapy-neardup: the extraction pool stalled (a worker died holding the lock of the "
                         "pipe the workers share); the %d pages in flight pass on unchecked and a new pool takes "
                         "over", len(lost))
            for page in lost:
                _fail(page, WorkerLost("the extraction pool stalled: a worker died holding its pipe's lock"))

    def pids(self) -> list[int]:
        """The worker processes' ids (for tests and diagnostics; reads pebble's internals)."""
        pool = self._pool
        if pool is None:
            return []
        workers = getattr(getattr(pool, "_pool_manager", None), "worker_manager", None)
        return [p.pid for p in getattr(workers, "workers", {}).values() if p.pid]

    def close(self) -> None:
        """Stop every worker and wait for them; pages still in flight fail with :class:`WorkerLost`."""
        self._stop_watching.set()
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            lost, self._inflight = list(self._inflight), {}
        if pool is not None:
            _dispose(pool)
        for page in lost:
            _fail(page, WorkerLost("the extraction pool was stopped"))


def _fail(page: Future, exc: BaseException) -> None:  # type: ignore[type-arg]
    try:
        page.set_exception(exc)
    except InvalidStateError:  # already settled
        pass


def _dispose(pool: Any) -> None:
    """Stop a pebble pool and wait a bounded time for its workers to end."""
    try:
        pool.stop()
        pool.join(CLOSE_WAIT_SECS)
    except Exception:  # noqa: BLE001 - a broken or wedged pool may not stop cleanly; its workers die with it
        logger.debug("scrapy-neardup: stopping an extraction pool did not finish cleanly", exc_info=True)


def _channel_free(pool: Any) -> bool:
    """Whether the pipe pebble's workers share can be locked within ``LOCK_WAIT_SECS`` (released at once).
    Reads pebble's internals; where they are not as expected, answers True (no verdict)."""
    channel = getattr(getattr(getattr(pool, "_pool_manager", None), "worker_manager", None), "workers_channel", None)
    lock = getattr(channel, "lock", None)
    if lock is None:
        return True
    try:
        with lock(block=True, timeout=LOCK_WAIT_SECS) as locked:
            return bool(locked)
    except (OSError, ValueError):  # the channel was closed meanwhile: that pool is being replaced anyway
        return True
