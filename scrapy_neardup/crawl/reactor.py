"""The reactor's side of the plugin's threads and processes: the extraction workers' pipes watched by the
reactor like sockets, calls on the plugin's own thread pools, and results handed back to the reactor."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReadDescriptor
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadable import isInIOThread
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from ..workers import run_reader_callback

if TYPE_CHECKING:
    from multiprocessing.connection import Connection


@implementer(IReadDescriptor)
class _WorkerPipe:
    """A worker's pipe as the reactor watches it, like a socket: the pool reads a result when it is there."""

    def __init__(self, conn: Connection, on_readable: Any) -> None:
        self.conn, self.on_readable = conn, on_readable
        self.fd = conn.fileno()  # kept: the reactor asks for it again after the pipe is closed

    def fileno(self) -> int:
        return self.fd

    def doRead(self) -> None:  # noqa: N802 - Twisted's IReadDescriptor
        # A callback error must not reach the reactor, which would stop watching this pipe for good.
        run_reader_callback(self.on_readable)

    def connectionLost(self, reason: Any) -> None:  # noqa: N802 - Twisted's IReadDescriptor
        pass

    def logPrefix(self) -> str:  # noqa: N802 - Twisted's ILoggingContext
        return "scrapy-neardup-worker"


class ReactorIO:
    """The workers' results read by the reactor (:class:`~scrapy_neardup.workers.PoolIO`): a page's
    result wakes the reactor once, and it is decided there (a local store) or handed to the store thread."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self._pipes: dict[Connection, _WorkerPipe] = {}

    def _in_reactor(self, fn: Any, *args: Any) -> None:
        if isInIOThread():
            fn(*args)
        else:
            self.reactor.callFromThread(fn, *args)

    def watch(self, conn: Connection, on_readable: Any) -> None:
        def add() -> None:
            pipe = self._pipes[conn] = _WorkerPipe(conn, on_readable)
            self.reactor.addReader(pipe)

        self._in_reactor(add)

    def release(self, conn: Connection) -> None:
        def remove() -> None:
            pipe = self._pipes.pop(conn, None)
            if pipe is not None:
                self.reactor.removeReader(pipe)
            conn.close()

        self._in_reactor(remove)

    def stop(self) -> None:
        pass


def pool_reader() -> ReactorIO | None:
    """Who reads the workers' results: the reactor, which watches their pipes where they are file
    descriptors (POSIX); elsewhere (``None``) a thread of the pool reads them and hands each result over."""
    return ReactorIO() if os.name == "posix" else None


def in_thread(pool: ThreadPool, fn: Any, *args: Any) -> Any:
    """Run ``fn`` on ``pool``; awaitable under both the asyncio and the default reactor."""
    from twisted.internet import reactor  # imported late: importing it at module level installs a reactor

    return maybe_deferred_to_future(deferToThreadPool(reactor, pool, fn, *args))


def reply(deferred: Deferred, outcome: Any) -> None:
    """Fire ``deferred`` with ``outcome`` in the reactor thread (at once when called there)."""
    if isInIOThread():  # decided where the worker's result was read: no hand-over
        deferred.callback(outcome)
        return
    from twisted.internet import reactor

    reactor.callFromThread(deferred.callback, outcome)
