"""Fingerprint stores behind one contract (:class:`~scrapy_neardup.store.base.Store`), chosen by URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .base import (
    BODY_DIGEST_BYTES,
    FORMAT_VERSION,
    Added,
    Candidate,
    DocRecord,
    Filing,
    Lookup,
    Query,
    Store,
    StoreError,
    StoreMismatchError,
    StoreUnavailableError,
    StoreWriteError,
    redact_url,
)

if TYPE_CHECKING:
    from .memory import MemoryStore
    from .sqlite import ForeignDatabaseError, SqliteStore, StoreLockedError

#: The backends, by the URL scheme each serves: ``module:Class`` in this package, imported when a URL asks
#: for it (reading settings needs no numpy). A backend of one's own needs no entry here:
#: ``NEARDUP_STORE_CLASS`` names it (see :func:`store_from_url`).
BACKENDS = {
    "memory": "memory:MemoryStore",
    "sqlite": "sqlite:SqliteStore",
    "redis": "redis:RedisStore",
    "rediss": "redis:RedisStore",
    "unix": "redis:RedisStore",
    "redis+cluster": "redis:RedisStore",
    "rediss+cluster": "redis:RedisStore",
}
#: URL schemes :func:`store_from_url` understands.
STORE_SCHEMES = tuple(BACKENDS)
#: The schemes of Redis stores (each spider's index under keys of its own).
REDIS_SCHEMES = tuple(scheme for scheme, backend in BACKENDS.items() if backend.startswith("redis:"))

__all__ = [
    "BACKENDS",
    "BODY_DIGEST_BYTES",
    "FORMAT_VERSION",
    "Added",
    "REDIS_SCHEMES",
    "STORE_SCHEMES",
    "Candidate",
    "DocRecord",
    "Filing",
    "ForeignDatabaseError",
    "Lookup",
    "MemoryStore",
    "Query",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreLockedError",
    "StoreMismatchError",
    "StoreUnavailableError",
    "StoreWriteError",
    "redact_url",
    "sqlite_path",
    "load_store_class",
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


def load_store_class(path: str) -> type[Store]:
    """The class a ``NEARDUP_STORE_CLASS`` names (``package.module.Class``): a :class:`Store` subclass with
    :meth:`Store.from_url`. ``ValueError`` says what is wrong with it."""
    import importlib

    module_name, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, Store)):
        raise ValueError(f"{path!r} is not a subclass of scrapy_neardup.store.Store")
    return found


def store_from_url(url: str, store_class: type[Store] | str | None = None, **options: object) -> Store:
    """Build (not yet open) the store a URL names: ``memory://``, ``sqlite:///path``, ``redis://host:port/db``
    (``rediss://`` for TLS, ``unix://`` for a socket; password and options as redis-py accepts them), by
    the backend registered for its scheme (:data:`BACKENDS`), or by ``store_class`` whatever the scheme
    (``NEARDUP_STORE_CLASS``: a backend of one's own). ``options`` are the settings' store options; each
    backend takes the ones it knows (:meth:`Store.from_url`)."""
    import importlib

    if isinstance(store_class, str):
        backend = load_store_class(store_class)
    elif store_class is not None:
        backend = store_class
    else:
        scheme = urlsplit(url).scheme.lower()
        if scheme not in BACKENDS:
            raise ValueError(
                f"Unknown store URL scheme {scheme!r} in {redact_url(url)!r}; allowed: "
                + ", ".join(f"{s}://" for s in STORE_SCHEMES)
            )
        module_name, _, name = BACKENDS[scheme].partition(":")
        backend = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    return backend.from_url(url, **options)
