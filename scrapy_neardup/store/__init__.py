"""Fingerprint stores behind one contract (:class:`~scrapy_neardup.store.base.Store`), chosen by URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .base import (
    FORMAT_VERSION,
    Candidate,
    DocRecord,
    Lookup,
    Store,
    StoreError,
    StoreMismatchError,
    StoreWriteError,
    redact_url,
)

if TYPE_CHECKING:
    from .memory import MemoryStore
    from .sqlite import ForeignDatabaseError, SqliteStore, StoreLockedError

#: URL schemes :func:`store_from_url` understands.
STORE_SCHEMES = ("memory", "sqlite", "redis", "rediss", "unix")

__all__ = [
    "FORMAT_VERSION",
    "STORE_SCHEMES",
    "Candidate",
    "DocRecord",
    "ForeignDatabaseError",
    "Lookup",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreLockedError",
    "StoreMismatchError",
    "StoreWriteError",
    "redact_url",
    "sqlite_path",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    """The backends (which need numpy) are imported on first use, so that reading settings stays light."""
    if name == "MemoryStore":
        from .memory import MemoryStore

        return MemoryStore
    if name in ("SqliteStore", "StoreLockedError", "ForeignDatabaseError"):
        from . import sqlite

        return getattr(sqlite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///relative`` or ``sqlite:////absolute`` URL (SQLAlchemy's form)."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"A SQLite store URL starts with 'sqlite:///', got {url!r}")
    path = url[len("sqlite:///") :]
    if not path:
        raise ValueError(f"The SQLite store URL {url!r} names no file")
    return path


def store_from_url(url: str, **options: object) -> Store:
    """Build (not yet open) the store a URL names: ``memory://``, ``sqlite:///path``, ``redis://host:port/db``
    (``rediss://`` for TLS, ``unix://`` for a socket; password and options as redis-py accepts them)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        from .sqlite import SqliteStore

        sqlite_options = {k: v for k, v in options.items() if k in ("commit_every", "commit_secs")}
        return SqliteStore(sqlite_path(url), **sqlite_options)  # type: ignore[arg-type]
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisStore

        redis_options = {k: v for k, v in options.items() if k in ("prefix", "retries", "backoff_secs", "timeout_secs")}
        return RedisStore(url, **redis_options)  # type: ignore[arg-type]
    raise ValueError(
        f"Unknown store URL scheme {scheme!r} in {redact_url(url)!r}; allowed: "
        + ", ".join(f"{s}://" for s in STORE_SCHEMES)
    )
