"""Fingerprint stores behind one contract (:class:`~scrapy_neardup.store.base.Store`), chosen by URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from .base import FORMAT_VERSION, Candidate, DocRecord, Store, StoreError, StoreMismatchError
from .memory import MemoryStore
from .sqlite import SqliteStore, StoreLockedError

#: URL schemes :func:`open_store` understands.
STORE_SCHEMES = ("memory", "sqlite")

__all__ = [
    "FORMAT_VERSION",
    "STORE_SCHEMES",
    "Candidate",
    "DocRecord",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreLockedError",
    "StoreMismatchError",
    "sqlite_path",
    "store_from_url",
]


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///relative`` or ``sqlite:////absolute`` URL (SQLAlchemy's form)."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"A SQLite store URL starts with 'sqlite:///', got {url!r}")
    path = url[len("sqlite:///") :]
    if not path:
        raise ValueError(f"The SQLite store URL {url!r} names no file")
    return path


def store_from_url(url: str, **options: object) -> Store:
    """Build (not yet open) the store a URL names: ``memory://``, ``sqlite:///path``."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        return SqliteStore(sqlite_path(url), **options)  # type: ignore[arg-type]
    raise ValueError(
        f"Unknown store URL scheme {scheme!r} in {url!r}; allowed: "
        + ", ".join(f"{s}://" for s in STORE_SCHEMES)
    )
