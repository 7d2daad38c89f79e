"""The extraction runtime of every front end (the crawl, ``dedup``, ``evaluate``): extraction and
fingerprinting in worker processes, so that a native crash costs a page, not a run.

One pool (:class:`ExtractionPool`, here), one initializer (:func:`init_worker`: the document pipeline the
settings describe, built once per worker), and tasks that are module-level functions taking their pipeline
from :func:`worker_pipeline`: :func:`analyze_html` and :func:`analyze_text` for the crawl (those three in
:mod:`.tasks`, what a worker runs), the batch and evaluation tasks in :mod:`scrapy_neardup.offline`. A
caller without a pool (``NEARDUP_WORKERS = 0``, a small batch) calls :func:`init_worker` in its own process
and runs the same tasks there.

trafilatura and lxml are C code: a parser fault (trafilatura's extraction on several threads of one
process aborted a crawl with a glibc ``double free``, see docs/reference.md) kills the process it happens
in. Here it happens in a worker: the crawler, its store and its decisions live in another process.
Extraction is also CPU work under the GIL; a pool of processes uses every core.

The pool is this module's own, because what a crawl pays per page beyond extraction is mostly travel:
pebble's pool (used before) hands each page to a scheduler thread, sends it down one pipe all workers share
and reads the result on a result thread, which then wakes the reactor: four thread wake-ups a page. Here
each worker has a pipe of its own; a page is written to an idle worker's pipe by the thread that submits it
(the reactor), and the results are read where the caller says (:class:`PoolIO`): in a crawl, by the
reactor itself, which watches the pipes like sockets, so a result costs one wake-up. Without a reactor (the
tests, other callers) a thread of the pool's own reads them. Up to :data:`PAGES_AHEAD` more pages wait in a
busy worker's pipe when the pipe has room for them: the worker goes on to the next as soon as it has sent
its result, instead of idling until the reactor, busy with the crawl, reads that result and answers with
the next page.

A crawl's workers may run at a lower CPU priority than the crawler (``nice``, POSIX niceness added in each
worker). On a machine whose cores the crawl fills, the reactor is the crawl's critical path: every page
passes through it, and a reactor kept waiting for a core while a worker runs holds back the pages the
workers would work on next. With the workers below it, the reactor runs whenever it has work, and the
pages already waiting in their pipes keep the workers busy whenever it has none. On a machine shared with
other busy processes the workers then get little CPU at all, so a crawl keeps them at its own priority
unless told otherwise.

* A worker that dies (SIGSEGV, SIGABRT, SIGKILL, the kernel's out-of-memory killer) closes its pipe: the
  page it was working on fails with :class:`WorkerLost` naming the signal, and a new worker takes its
  place; the pages that waited in its pipe behind that one (never begun: the worker reads a page only after
  sending its last result, which is read before the pipe's end) go back to the head of the queue. No
  lock is shared between workers, so a worker killed at any instant cannot block the others (pebble's
  shared pipe could be).
* A page past ``timeout`` has its worker killed by the pool's watchdog thread; it fails with
  :class:`WorkerTimeout` and the worker is replaced.
* ``max_tasks`` recycles each worker after so many pages, which bounds the memory a long crawl lets a
  worker grow to.

What crosses to a worker is the task (a module-level function and its arguments: a page's body, URL and
``Content-Type``; a body from :data:`OUT_OF_BAND_BYTES` on follows the pickled task as a message of its own,
pickle protocol 5's out-of-band buffers, PEP 574, rather than being copied into the pickle); what comes
back is :meth:`Prepared.to_wire <scrapy_neardup.engine.prepare.Prepared.to_wire>`, pickled: both ends are
this package's own processes, and nothing read from a store or a page is ever unpickled.

Workers start from a fork server (a clean single-threaded process started once, with the extraction
modules imported and the tokenizer's tables built: :mod:`.preload`), never by forking the crawler, whose
threads may hold locks at fork time, and without running the parent's ``__main__`` module again
(:func:`_without_main`). Each worker ignores SIGINT (Ctrl-C reaches the whole process group; the crawler
decides what it means) and asks the kernel to kill it when its parent dies, so no worker outlives a crawler
that was killed.

Nothing here imports Scrapy or Twisted.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, InvalidStateError
from itertools import count
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Protocol

from .tasks import (
    IN_PROCESS,
    analyze_html,
    analyze_text,
    init_worker,
    prepare_html,
    prepare_text,
    worker_pipeline,
)

if TYPE_CHECKING:
    from ..settings import Config

logger = logging.getLogger("scrapy_neardup")

#: How long closing the pool waits for its worker processes to end before killing them.
CLOSE_WAIT_SECS = 5.0
#: How long a dead worker's process is waited for, to read its exit code.
REAP_WAIT_SECS = 1.0
#: A task's header: its number, and how many of its arguments follow it out of band (each a message of its
#: own: a page's body crosses the pipe as it is, not copied into a pickle first).
_TASK = struct.Struct("<QI")
#: A reply's header: the number of the task it answers.
_REPLY = struct.Struct("<Q")
#: ``bytes`` arguments from this size on are sent out of band (pickle protocol 5, PEP 574).
OUT_OF_BAND_BYTES = 16 * 1024
#: The send buffer asked for a worker's pipe (the kernel may grant less: ``net.core.wmem_max``), so that a
#: page of up to half of it can wait there behind the one the worker is on (:meth:`ExtractionPool._next`).
PIPE_BUFFER = 2 * 2**20
#: Pages that may wait in a worker's pipe behind the one it works on (as the pipe's room allows): enough
#: that a worker seldom idles while the reactor finishes a turn of the crawl's work before reading its
#: results; few, because a page handed out early carries the learned selectors of that moment.
PAGES_AHEAD = 3


class AtSend:
    """A task's argument made when the task leaves the pool's queue for a worker, not when it is submitted.

    A page may wait in the queue while every worker is busy (in a CPU-bound crawl, most of the concurrent
    requests wait there); what its caller knows about it can change meanwhile: a crawl's learned selectors
    (a template learned, or retired, while the page waited) are taken as they are when the page is handed
    out. ``make`` runs on the thread that hands the page out; its error is the page's error."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def made(args: Iterable[Any]) -> tuple[Any, ...]:
    """A task's arguments with each :class:`AtSend` made (for a caller that runs the task itself)."""
    return tuple(arg.make() if type(arg) is AtSend else arg for arg in args)


class WorkerLost(Exception):
    """The worker process holding a page died (its exit code or signal is in the message)."""


class WorkerTimeout(Exception):
    """A page took longer than the timeout; its worker was stopped and replaced."""


class WorkerError(Exception):
    """A task failed in its worker with an error that could not be sent back as it was."""


def serve(conn: Connection, config: Config, nice: int = 0) -> None:
    """A worker's life: a task in (``(function, arguments)``, pickled, then its out-of-band arguments), its
    result out (the task's number, then ``(True, value)`` or ``(False, exception)``, pickled), one at a time,
    until its pipe closes. ``nice``: how much to lower its CPU priority first (POSIX niceness)."""
    lower_priority(nice)
    init_worker(config)
    while True:
        try:
            message = conn.recv_bytes()
            if not message:  # the pool's word to stop
                return
            number, out_of_band = _TASK.unpack_from(message)
            buffers = [conn.recv_bytes() for _ in range(out_of_band)]
        except (EOFError, OSError):
            return
        try:
            fn, args = pickle.loads(memoryview(message)[_TASK.size :], buffers=buffers)
            reply: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:  # noqa: BLE001 - the task's own error goes back to the page that caused it
            reply = (False, exc)
        try:
            data = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an error (or a result) that does not pickle
            data = pickle.dumps((False, WorkerError(f"{type(reply[1]).__name__}: {reply[1]} ({exc})")))
        try:
            conn.send_bytes(_REPLY.pack(number) + data)
        except OSError:  # the pool closed the pipe: it is done with this worker
            return


def lower_priority(nice: int) -> None:
    """Add ``nice`` to this process's niceness, where the system has it (raising it never needs a privilege;
    a system that refuses leaves the worker as it is)."""
    if nice > 0 and hasattr(os, "nice"):
        try:
            os.nice(nice)
        except OSError:  # pragma: no cover - a sandbox that forbids it: the worker runs at the crawler's priority
            pass


class _StartingWorker(threading.local):
    """Whether this thread is starting one of the pool's workers or their fork server (read by the wrapper of
    :func:`_without_main`)."""

    now = False


_starting = _StartingWorker()
_wrap_lock = threading.Lock()
#: Starts (of a worker, or of the fork server) in progress on any thread; whether the interpreter is exiting
#: (none begins then); their condition.
_starts = 0
_exiting = False
_starts_done = threading.Condition()


class _Exiting(Exception):
    """A worker is not started once the interpreter exits."""


@atexit.register
def _let_starts_finish() -> None:
    """At the interpreter's exit, no worker starts any more, and a start in progress on another thread is let
    finish (for up to :data:`CLOSE_WAIT_SECS`). A process that exits without closing its pool (``scrapy shell
    -c`` ends so) would otherwise have a start cut off in the middle of its request to the fork server, which
    then dies with an ``EOFError`` traceback on the user's terminal: one under way, or one begun to replace a
    worker that ``multiprocessing`` stops at exit (its daemon processes are terminated after this runs). A
    worker started so finds its pipe closed, and ends."""
    global _exiting
    with _starts_done:
        _exiting = True
        _starts_done.wait_for(lambda: _starts == 0, CLOSE_WAIT_SECS)


def _without_main(start: Callable[[], Any]) -> None:
    """Run ``start`` (a process's start, or the fork server's) without having the parent's ``__main__`` module
    run in the process it starts (a forked one never does).

    The fork server's and spawn's start methods send the child what it needs to prepare itself
    (``multiprocessing.spawn``'s preparation data), and that includes the parent's main script, which the
    child runs again as ``__mp_main__`` so that objects defined there can be unpickled (the Python
    documentation's "safe importing of the main module"). A crawl run from a script whose crawl sits at
    its top level, as in Scrapy's own "Run Scrapy from a script" example, would then start that crawl again
    in every worker before the worker serves a page (on a store shared between processes, crawling the site
    again). A worker needs nothing from ``__main__``: its task, its arguments and its settings are this
    package's own. So the preparation data of a process started here leaves the main module out; what other
    code starts is left as it is (the wrapper acts only on the thread that is starting a worker, and is
    installed once)."""
    global _starts
    from multiprocessing import spawn

    with _wrap_lock:
        prepared = getattr(spawn, "get_preparation_data", None)  # None: a Python that prepares a child otherwise
        if prepared is not None and not getattr(prepared, "_scrapy_neardup", False):

            def get_preparation_data(name: str) -> dict[str, Any]:
                data = prepared(name)
                if _starting.now:
                    data.pop("init_main_from_path", None)
                    data.pop("init_main_from_name", None)
                return data

            get_preparation_data._scrapy_neardup = True  # type: ignore[attr-defined]
            spawn.get_preparation_data = get_preparation_data
    with _starts_done:
        if _exiting:
            raise _Exiting
        _starts += 1
    _starting.now = True
    try:
        start()
    finally:
        _starting.now = False
        with _starts_done:
            _starts -= 1
            _starts_done.notify_all()


def start_fork_server() -> None:
    """Have the fork server the crawl's workers come from start now, without waiting for it: it imports the
    extraction modules (about a third of a second of one core) while the caller goes on, here the crawl's
    own start-up, so that the workers can come up as soon as the spider opens. Where workers are spawned,
    nothing to do."""
    ctx = _context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        _without_main(forkserver.ensure_running)


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # Imported once in the fork server, shared by every worker forked from it.
        ctx.set_forkserver_preload(
            [
                "scrapy_neardup.workers",
                "scrapy_neardup.workers.tasks",
                "scrapy_neardup.engine.prepare",
                "trafilatura",
                "scrapy_neardup.workers.preload",
            ]
        )
        return ctx
    return multiprocessing.get_context("spawn")


class PoolIO(Protocol):
    """Who watches the workers' pipes: ``watch(conn, on_readable)`` calls ``on_readable()`` (on the
    watcher's thread) whenever ``conn`` has a result or has closed, until ``release(conn)``, which stops
    watching it and closes it (on the watcher's thread: a pipe closed while it is being watched could
    have its number reused by the next worker's). Both may be called from any thread."""

    def watch(self, conn: Connection, on_readable: Callable[[], None]) -> None: ...

    def release(self, conn: Connection) -> None: ...

    def stop(self) -> None: ...


class ThreadIO:
    """:class:`PoolIO` on a thread of its own, for callers without an event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[Connection, Callable[[], None]] = {}
        self._released: list[Connection] = []
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="scrapy-neardup-results", daemon=True)
        self._thread.start()

    def watch(self, conn: Connection, on_readable: Callable[[], None]) -> None:
        with self._lock:
            self._watched[conn] = on_readable
        self._wake()

    def release(self, conn: Connection) -> None:
        with self._lock:
            self._watched.pop(conn, None)
            self._released.append(conn)
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"")
        except OSError:  # stopped
            pass

    def _run(self) -> None:
        while True:
            with self._lock:
                watched, released, self._released = dict(self._watched), self._released, []
            for conn in released:
                conn.close()
            if self._stopped:
                return
            for ready in wait([self._wake_r, *watched]):
                if ready is self._wake_r:
                    try:
                        while self._wake_r.poll():
                            self._wake_r.recv_bytes()
                    except (EOFError, OSError):
                        return
                else:
                    with self._lock:
                        still = self._watched.get(ready)  # type: ignore[call-overload]
                    if still is not None:
                        run_reader_callback(still)

    def stop(self) -> None:
        self._stopped = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_WAIT_SECS)
            self._wake_w.close()
            self._wake_r.close()


class _Worker:
    """One worker process, its end of its pipe, the page it works on and the pages sent behind it (oldest
    first), and how many bytes of arguments the pages sent behind another may have in all (its pipe's room:
    0, none)."""

    __slots__ = ("process", "conn", "page", "args", "behind", "room", "sending", "started", "done", "timed_out", "gone")

    def __init__(self, process: Any, conn: Connection, room: int = 0) -> None:
        self.process, self.conn = process, conn
        #: Held from choosing a page for the worker to writing it: its pages reach its pipe in the order they
        #: were given to it, which is the order its results are read back in, whichever threads hand them out.
        self.sending = threading.RLock()
        self.page: Future | None = None
        self.args: tuple[Any, ...] = ()
        self.behind: deque[tuple[Future, tuple[Any, ...]]] = deque()
        self.room = room
        self.started = 0.0
        self.done = 0
        self.timed_out = False
        self.gone = False

    @property
    def behind_bytes(self) -> int:
        """The bytes of arguments of the pages sent behind the one it works on (at most :data:`PAGES_AHEAD`)."""
        return sum(_bytes_of(args) for _, args in self.behind)


class ExtractionPool:
    """A pool of ``workers`` processes running :func:`analyze_html` and :func:`analyze_text` (or any
    module-level function: the tests send their own).

    :meth:`submit` returns a :class:`concurrent.futures.Future` of the task's value, which fails with
    :class:`WorkerLost` or :class:`WorkerTimeout`; its callbacks run where the results are read (``io``
    of :meth:`start`). An argument given as :class:`AtSend` is made when the page is handed to a worker.
    ``timeout`` is per page, in seconds (``None``: none); ``max_tasks`` recycles a worker
    after that many pages (0: never). A page waits in the pool's queue while every worker is busy.

    ``fork_first``: a caller that has no thread of its own when it calls :meth:`start` (the ``dedup``
    command) may have the first workers forked from itself, which saves starting the fork server and
    importing the extraction modules again (a third of a second, most of a small run); the workers that
    replace them later come from the fork server, as always in a crawl, whose threads make forking it unsafe.
    """

    def __init__(
        self,
        config: Config,
        workers: int,
        timeout: float | None = None,
        max_tasks: int = 0,
        fork_first: bool = False,
        nice: int = 0,
    ) -> None:
        if workers < 1:
            raise ValueError("an extraction pool needs at least one worker")
        self.config = config
        self.workers = workers
        self.timeout = timeout
        self.max_tasks = max_tasks
        self.nice = nice
        self.replaced = 0  # workers that died or timed out and were replaced
        self.recycled = 0  # workers retired after max_tasks pages
        self._lock = threading.RLock()
        self._ctx = _context()
        self._fork_first = fork_first and "fork" in multiprocessing.get_all_start_methods()
        self._io: PoolIO | None = None
        self._own_io = False
        self._workers: list[_Worker] = []
        self._queue: deque[tuple[Future, tuple[Any, ...]]] = deque()
        self._closed = False
        self._starting = 0  # workers being started in place of others (not yet in _workers)
        self._numbers = count(1)
        self._stop_watching = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._starter: threading.Thread | None = None

    def start(self, io: PoolIO | None = None, wait: bool = True) -> None:
        """Start the workers; their results are read by ``io`` (by default a thread of the pool's own).

        ``wait`` false: return at once and start them on a thread of the pool's own. The first worker waits
        for the fork server to import the extraction modules (about a third of a second of one core); a
        crawl meanwhile opens its connections and fetches its first pages, which wait in the queue and go
        to the workers as they come up."""
        first = (
            [self._start_process(multiprocessing.get_context("fork")) for _ in range(self.workers)]
            if self._fork_first and threading.active_count() == 1
            else []
        )
        self._own_io = io is None
        self._io = io if io is not None else ThreadIO()
        for process, conn in first:
            self._add(process, conn)
        rest = self.workers - len(first)
        if wait:
            for _ in range(rest):
                self._spawn()
        elif rest:
            with self._lock:
                self._starting += rest
            self._starter = threading.Thread(
                target=self._start_rest, args=(rest,), name="scrapy-neardup-start", daemon=True
            )
            self._starter.start()
        self._watchdog = threading.Thread(target=self._watch, name="scrapy-neardup-watchdog", daemon=True)
        self._watchdog.start()

    def _start_rest(self, workers: int) -> None:
        """The starting thread of :meth:`start` (``wait`` false): each worker counted in ``_starting`` started
        and given the pages that wait (a worker that cannot start is said, and the pages fail once none is
        left to start, as when a dead worker cannot be replaced)."""
        for _ in range(workers):
            self._replace(counted=True)

    # -- workers -----------------------------------------------------------------------------------
    def _start_process(self, ctx: Any) -> tuple[Any, Connection]:
        ours, theirs = multiprocessing.Pipe(duplex=True)
        process = ctx.Process(
            target=serve, args=(theirs, self.config, self.nice), name="scrapy-neardup-worker", daemon=True
        )
        _without_main(process.start)
        theirs.close()  # the worker's end lives in the worker only: its death closes the pipe
        return process, ours

    def _spawn(self) -> _Worker:
        return self._add(*self._start_process(self._ctx))

    def _add(self, process: Any, ours: Connection) -> _Worker:
        worker = _Worker(process, ours, _pipe_room(ours))
        with self._lock:
            closed = self._closed
            if not closed:
                self._workers.append(worker)
        if closed:  # the pool closed while this one started: it must not outlive it
            worker.gone = True
            process.kill()
            process.join(REAP_WAIT_SECS)
            ours.close()
            return worker
        assert self._io is not None
        self._io.watch(ours, lambda: self._readable(worker))
        return worker

    def _send(self, worker: _Worker, page: Future, args: tuple[Any, ...]) -> None:
        """Hand ``page`` to ``worker`` (marked as its page, or among the pages behind it, by the caller, under
        the lock)."""
        fn, fn_args = args
        buffers: list[pickle.PickleBuffer] = []
        try:
            sent = tuple(_out_of_band(arg) for arg in made(fn_args))
            pickled = pickle.dumps((fn, sent), 5, buffer_callback=buffers.append)
            data = _TASK.pack(next(self._numbers), len(buffers)) + pickled
        except Exception as exc:  # noqa: BLE001 - arguments that cannot be made or pickled: this page's error only
            with self._lock:
                if worker.page is page:
                    worker.page = None
                else:
                    _forget_behind(worker, page)
            _fail(page, exc)
            self._next(worker)
            return
        try:
            worker.conn.send_bytes(data)
            for buffer in buffers:
                worker.conn.send_bytes(buffer.raw())
        except OSError:  # the worker died meanwhile; its pipe's end-of-file is on its way to _readable
            pass

    def _next(self, worker: _Worker) -> None:
        """Give a worker the pages waiting (the one place a page is handed out): one to work on, if it is
        idle, and then up to :data:`PAGES_AHEAD` to wait in its pipe behind that, as far as the pipe has room
        for them (the worker goes on to each without waiting for this process to read its result and
        answer), none beyond the page after which the worker is to be recycled."""
        with worker.sending:
            while True:
                with self._lock:
                    if self._closed or worker.gone or not self._queue:
                        return
                    if worker.page is None:
                        page, args = self._queue.popleft()
                        worker.page, worker.args, worker.started = page, args, time.monotonic()
                    else:
                        size = _bytes_of(self._queue[0][1])
                        if (
                            len(worker.behind) >= PAGES_AHEAD
                            or worker.behind_bytes + size > worker.room
                            or (self.max_tasks and worker.done + 1 + len(worker.behind) >= self.max_tasks)
                        ):
                            return
                        page, args = self._queue.popleft()
                        worker.behind.append((page, args))
                self._send(worker, page, args)

    def _readable(self, worker: _Worker) -> None:
        """On the reader's thread: a worker's result, or its death."""
        try:
            data = worker.conn.recv_bytes()
        except (EOFError, OSError):
            self._lost(worker)
            return
        with self._lock:
            page, worker.page, worker.args = worker.page, None, ()
            if worker.behind:  # the worker went on to the next when it sent this result
                worker.page, worker.args = worker.behind.popleft()
                worker.started = time.monotonic()
            worker.done += 1
            retire = bool(self.max_tasks) and worker.done >= self.max_tasks and not self._closed
            if retire:  # out of the pool before its page is answered: no new page may reach it
                worker.gone = True
                self._workers.remove(worker)
                self._starting += 1  # its successor, started by _retire
        if not retire:
            self._next(worker)  # first: the worker has its next pages while this one is decided
        if page is not None:
            try:
                ok, value = pickle.loads(memoryview(data)[_REPLY.size :])
            except Exception as exc:  # noqa: BLE001 - an exception class the crawler cannot rebuild
                ok, value = False, WorkerError(f"its worker's reply could not be read: {exc}")
            if ok:
                _resolve(page, value)
            else:
                _fail(page, value)
        if retire:
            self._retire(worker)

    def _lost(self, worker: _Worker) -> None:
        """A worker's pipe closed: it died (or was killed for a timeout). Its page fails; a new worker
        takes its place."""
        with self._lock:
            if worker.gone:
                return
            worker.gone = True
            page, timed_out, behind = worker.page, worker.timed_out, list(worker.behind)
            worker.page = None
            worker.behind.clear()
            if worker in self._workers:
                self._workers.remove(worker)
            closed = self._closed
            if behind and not closed:  # never begun (their results would have come first): again, in order
                self._queue.extendleft(reversed(behind))
                behind = []
        assert self._io is not None
        self._io.release(worker.conn)
        worker.process.join(REAP_WAIT_SECS)
        code = worker.process.exitcode
        for waiting, _ in behind:
            _fail(waiting, WorkerLost("the extraction pool was stopped"))
        if not closed:
            self.replaced += 1
            self._replace()
        if page is None:
            return
        if timed_out:
            _fail(page, WorkerTimeout("extraction took longer than NEARDUP_WORKER_TIMEOUT"))
        elif closed:
            _fail(page, WorkerLost("the extraction pool was stopped"))
        else:
            _fail(page, WorkerLost(f"its extraction worker died ({_how_it_ended(code)})"))

    def _replace(self, counted: bool = False) -> None:
        """Start a worker in place of one that is gone, and give it the next page waiting. If none can be
        started (out of processes, memory) and none is left, the pages waiting fail rather than wait forever;
        the next page submitted tries again. ``counted``: the caller already counted it in ``_starting``."""
        if not counted:
            with self._lock:
                self._starting += 1
        try:
            worker = self._spawn()
        except _Exiting:  # the interpreter is exiting: nothing more is extracted
            with self._lock:
                self._starting -= 1
            return
        except Exception as exc:  # noqa: BLE001 - whatever stopped the start, no page may wait for ever
            logger.error("scrapy-neardup: could not start an extraction worker: %s", exc)
            with self._lock:
                self._starting -= 1
                stranded = [page for page, _ in self._queue] if not self._workers and not self._starting else []
                if stranded:
                    self._queue.clear()
            for page in stranded:
                _fail(page, WorkerLost(f"no extraction worker could be started ({exc})"))
            return
        with self._lock:
            self._starting -= 1
        self._next(worker)

    def _retire(self, worker: _Worker) -> None:
        """A worker past ``max_tasks`` (already out of the pool) is told to stop; a new one takes its place."""
        _stop(worker)
        assert self._io is not None
        self._io.release(worker.conn)
        threading.Thread(target=_reap, args=(worker.process,), name="scrapy-neardup-reap", daemon=True).start()
        self.recycled += 1
        self._replace(counted=True)

    def _watch(self) -> None:
        """The watchdog: kills the worker of a page past its timeout (its pipe then closes: :meth:`_lost`)."""
        while not self._stop_watching.wait(min(0.1, self.timeout / 4) if self.timeout else 1.0):
            if not self.timeout:
                continue
            deadline = time.monotonic() - self.timeout
            with self._lock:
                late = [w for w in self._workers if w.page is not None and not w.timed_out and w.started < deadline]
                for worker in late:
                    worker.timed_out = True
            for worker in late:
                try:
                    os.kill(worker.process.pid, signal.SIGKILL)
                except OSError:  # already gone
                    pass

    # -- callers -----------------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        page: Future = Future()
        task = (fn, args)
        with self._lock:
            if self._closed or self._io is None:
                raise RuntimeError("the extraction pool is closed")
            empty = not self._workers and not self._starting
        if empty:  # every worker died and none could be started since: try again now
            self._replace()
            with self._lock:
                empty = not self._workers and not self._starting
            if empty:
                _fail(page, WorkerLost("no extraction worker could be started"))
                return page
        with self._lock:
            self._queue.append((page, task))
            idle = next((w for w in self._workers if w.page is None and not w.gone), None) or next(
                (w for w in self._workers if len(w.behind) < PAGES_AHEAD and not w.gone), None
            )
        if idle is not None:
            self._next(idle)
        return page

    def pids(self) -> list[int]:
        """The worker processes' ids (for tests and diagnostics)."""
        with self._lock:
            return [w.process.pid for w in self._workers if w.process.pid]

    def running(self) -> list[tuple[int, float, tuple[Any, ...]]]:
        """``(pid, seconds since it took the page, (function, arguments))`` of each busy worker (for tests
        and diagnostics)."""
        now = time.monotonic()
        with self._lock:
            return [(w.process.pid, now - w.started, w.args) for w in self._workers if w.page is not None]

    def close(self) -> None:
        """Stop every worker and wait for them; pages still in flight or waiting fail with :class:`WorkerLost`."""
        self._stop_watching.set()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers, self._workers = list(self._workers), []
            lost = [page for page, _ in self._queue] + [w.page for w in workers if w.page is not None]
            lost += [waiting for w in workers for waiting, _ in w.behind]
            busy = [w for w in workers if w.page is not None]
            self._queue.clear()
            for worker in workers:
                worker.gone, worker.page = True, None
                worker.behind.clear()
        starter = self._starter
        if starter is not None:  # a worker it starts now is stopped by _add: wait for it, so that none outlives us
            starter.join(CLOSE_WAIT_SECS)
        for worker in workers:
            if worker in busy:
                worker.process.kill()  # its page is failed below: nothing to wait for
            else:
                _stop(worker)
        deadline = time.monotonic() + CLOSE_WAIT_SECS
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(REAP_WAIT_SECS)
        io = self._io
        if io is not None:
            for worker in workers:
                io.release(worker.conn)
            if self._own_io:
                io.stop()
        for page in lost:
            _fail(page, WorkerLost("the extraction pool was stopped"))


def in_order(
    pool: ExtractionPool, fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]], ahead: int
) -> Iterator[tuple[tuple[Any, ...], Future]]:
    """Run ``fn(*args)`` for each ``args`` of ``tasks`` on ``pool``, at most ``ahead`` at a time, and give back
    ``(args, future)`` in the order of ``tasks``, each future done (its value or its error)."""
    waiting: deque[tuple[tuple[Any, ...], Future]] = deque()
    for args in tasks:
        waiting.append((args, pool.submit(fn, *args)))
        if len(waiting) >= ahead:
            args, page = waiting.popleft()
            _wait(page)
            yield args, page
    while waiting:
        args, page = waiting.popleft()
        _wait(page)
        yield args, page


def _wait(page: Future) -> None:
    try:
        page.exception()
    except Exception:  # noqa: BLE001 - cancelled: the caller reads it from the future
        pass


def run_reader_callback(on_readable: Callable[[], None]) -> None:
    """Run a pipe's callback; a bug in it is logged and must not stop the reading of the other pipes."""
    try:
        on_readable()
    except Exception:  # the reader serves every worker
        logger.exception("scrapy-neardup: error while reading an extraction worker's pipe")


def _forget_behind(worker: _Worker, page: Future) -> None:
    """Take ``page`` out of the pages sent behind ``worker``'s (one that could not be sent)."""
    for at, (waiting, _) in enumerate(worker.behind):
        if waiting is page:
            del worker.behind[at]
            return


def _bytes_of(args: tuple[Any, ...]) -> int:
    """The bytes a task's arguments put in a pipe, near enough (its bodies; the rest is small)."""
    return sum(len(arg) for arg in args[1] if isinstance(arg, (bytes, bytearray, memoryview, str)))


def _pipe_room(conn: Connection) -> int:
    """How many bytes of arguments may wait in a worker's pipe behind the page it works on without the
    sender ever blocking: half the socket's send buffer (raised to :data:`PIPE_BUFFER` where the system
    allows it), which also holds what the kernel adds to each message. 0 where the pipe is not a socket."""
    try:
        sock = socket.socket(fileno=conn.fileno())
    except (OSError, ValueError):
        return 0
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIPE_BUFFER)
        except OSError:  # above the system's limit: the buffer stays as it was
            pass
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2
    except OSError:
        return 0
    finally:
        sock.detach()  # the Connection keeps its descriptor


def _out_of_band(arg: Any) -> Any:
    return pickle.PickleBuffer(arg) if type(arg) is bytes and len(arg) >= OUT_OF_BAND_BYTES else arg


def _resolve(page: Future, value: Any) -> None:
    try:
        page.set_result(value)
    except InvalidStateError:  # already settled
        pass


def _fail(page: Future, exc: BaseException) -> None:
    try:
        page.set_exception(exc)
    except InvalidStateError:  # already settled
        pass


def _how_it_ended(code: int | None) -> str:
    """A process's exit code in words: ``signal SIGSEGV``, ``exit code 1``."""
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:  # a signal without a name (a real-time one)
            return f"signal {-code}"
    return f"exit code {code}"


def _stop(worker: _Worker) -> None:
    """Tell an idle worker to stop (an empty message)."""
    try:
        worker.conn.send_bytes(b"")
    except OSError:  # already gone
        pass


def _reap(process: Any) -> None:
    """Wait for a retired worker to end (it finishes nothing: its pipe is closed), killing it if it lingers."""
    process.join(CLOSE_WAIT_SECS)
    if process.is_alive():
        process.kill()
        process.join(REAP_WAIT_SECS)


__all__ = [
    "IN_PROCESS",
    "PAGES_AHEAD",
    "AtSend",
    "OUT_OF_BAND_BYTES",
    "ExtractionPool",
    "PoolIO",
    "ThreadIO",
    "WorkerError",
    "WorkerLost",
    "WorkerTimeout",
    "analyze_html",
    "analyze_text",
    "in_order",
    "init_worker",
    "made",
    "prepare_html",
    "prepare_text",
    "run_reader_callback",
    "worker_pipeline",
]
