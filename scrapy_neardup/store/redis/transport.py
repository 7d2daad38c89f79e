"""Talking to Redis: commands packed for the wire (with hiredis where installed, numpy for the MGETs), and what
each redis-py error means for the store."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger("scrapy_neardup.store.redis")


def _optional(name: str) -> Any:
    """A module when it is installed, else ``None`` (imported by name: mypy types it ``Any`` either way)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


#: hiredis, where installed: redis-py packs and parses in Python without it.
_hiredis: Any = _optional("hiredis")


def packed_commands(conn: Any, commands: Sequence[tuple[Any, ...] | bytes]) -> Any:
    """Commands in the Redis protocol: by hiredis when it is there (redis-py's own packing looks at every
    argument in Python, thousands per batch), else by the connection; a command given as bytes is packed
    already (:func:`mget_command`)."""
    if _hiredis is not None:
        return [b"".join([c if isinstance(c, bytes) else _hiredis.pack_command(c) for c in commands])]
    return [c if isinstance(c, bytes) else b"".join(conn.pack_command(*c)) for c in commands]


def mget_command(parts: Iterable[tuple[bytes, np.ndarray]]) -> bytes:
    """An MGET of bins, packed in the Redis protocol here: each part is a bin name's head (a group's tag
    and kind) and the u16 numbers that end the names. A lookup reads thousands of bins; built row by row in
    numpy, their names cost no Python object each."""
    blocks, count = [], 0
    for head, numbers in parts:
        n = len(numbers)
        if not n:
            continue
        lead = b"$%d\r\n" % (len(head) + 2) + head
        rows = np.empty((n, len(lead) + 4), dtype=np.uint8)
        rows[:, : len(lead)] = np.frombuffer(lead, dtype=np.uint8)
        rows[:, len(lead) : len(lead) + 2] = np.asarray(numbers, dtype="<u2").view(np.uint8).reshape(n, 2)
        rows[:, -2:] = (13, 10)
        blocks.append(rows.tobytes())
        count += n
    return b"*%d\r\n$4\r\nMGET\r\n" % (count + 1) + b"".join(blocks)


class RedisErrors:
    """What a redis-py exception means for the store, told by its class, never by its message text (redis-py
    strips the error code from the message of the errors it knows: a ``NOSCRIPT`` reply is a
    :class:`~redis.exceptions.NoScriptError` whose text is "No matching script. Please use EVAL.").

    * ``refused``: a login or an ACL refused (``AuthenticationError``, ``AuthorizationError``,
      ``NoPermissionError``): retrying cannot help.
    * ``noscript``: the server lost its script cache (``NoScriptError``): load the scripts again and repeat.
    * ``unreachable``: the connection failed, dropped or timed out, or the server is loading its data set
      (``BusyLoadingError``): retried with back-off.
    * ``transient``: a cluster is in failover or moving slots (``ClusterDownError``,
      ``MasterDownError``, ``TryAgainError``, ``MovedError``, ``AskError``, and on a cluster a demoted master's
      ``ReadOnlyError``), or the server is busy running another client's script (``BUSY``, the one code
      redis-py files under no class of its own: told by the error code the RESP reply starts with).
    * ``readonly``: one server that became a replica (``ReadOnlyError`` off a cluster).
    * ``fatal``: anything else.

    On a cluster a script that touched a key whose slot moved after the client's last look at the slot map
    fails with a plain ``ResponseError``; such an error is ``transient`` there, and retried on a fresh map.
    """

    def __init__(self, errors: Any) -> None:
        #: What redis-py raises: its own errors, and the cluster client's (not a RedisError).
        self.redis_error: tuple[type[Exception], ...] = tuple(
            getattr(errors, name) for name in ("RedisError", "RedisClusterException") if hasattr(errors, name)
        )
        self._refused = tuple(
            getattr(errors, name)
            for name in ("AuthenticationError", "AuthorizationError", "NoPermissionError")
            if hasattr(errors, name)
        )
        self._noscript = errors.NoScriptError
        self._readonly = errors.ReadOnlyError
        self._unreachable = tuple(
            getattr(errors, name)
            for name in ("ConnectionError", "TimeoutError", "BusyLoadingError")
            if hasattr(errors, name)
        )
        self._transient = tuple(
            getattr(errors, name)
            for name in (
                "ClusterDownError",
                "MasterDownError",
                "TryAgainError",
                "AskError",
                "MovedError",
                "ClusterError",
                "SlotNotCoveredError",
                "RedisClusterException",
            )
            if hasattr(errors, name)
        )
        self._response = errors.ResponseError

    def classify(self, exc: BaseException, cluster: bool) -> str:
        if isinstance(exc, self._refused):  # before ConnectionError: redis-py files a refused login under it
            return "refused"
        if isinstance(exc, self._noscript):
            return "noscript"
        if isinstance(exc, self._readonly):
            return "transient" if cluster else "readonly"
        if isinstance(exc, self._unreachable):
            return "unreachable"
        if isinstance(exc, self._transient):
            return "transient"
        if type(exc) is self._response:
            if str(exc).split(" ", 1)[0] == "BUSY":  # the reply's error code, which redis-py leaves in place
                return "transient"
            if cluster:
                return "transient"
        return "fatal"
