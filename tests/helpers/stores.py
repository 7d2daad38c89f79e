"""The stores every contract test runs on: each backend, Redis once per server kind of the matrix, on
servers shared by the session (stopped by :func:`stop_shared`)."""

from __future__ import annotations

import uuid

from scrapy_neardup.store import MemoryStore, SqliteStore

from .redis_server import RedisServer, kind_named, server_kinds

_redis: dict[str, RedisServer] = {}
_clusters: dict = {}
_prefixes: dict[str, str] = {}


def shared_redis(tmp_root, kind=None) -> RedisServer:
    """One server of each kind for the whole session (each test uses its own key prefix)."""
    server_kind = kind_named(kind)
    if server_kind.name not in _redis:
        _redis[server_kind.name] = RedisServer(
            str(tmp_root / f"redis-shared-{server_kind.name}"), kind=server_kind
        ).start()
    return _redis[server_kind.name]


def expand_backends(kinds):
    """Store kinds with "redis" (and "redis-scan") spelt out once per Redis server kind of the matrix."""
    out = []
    for kind in kinds:
        if kind in ("redis", "redis-scan"):
            out += [f"{kind}@{k.name}" for k in server_kinds()]
        else:
            out.append(kind)
    return out


#: "sqlite-merging" is the SQLite store merging its staged documents into the band index every second
#: document, so that every contract test also runs across merges; "redis@<server>", the Redis store on one
#: server kind of the matrix (tests/helpers/redis_server.py).
STORE_BACKENDS = expand_backends(["memory", "sqlite", "sqlite-merging", "redis"])
#: Backends whose data outlives the process.
PERSISTENT_BACKENDS = expand_backends(["sqlite", "sqlite-merging", "redis"])


def make_store(kind, tmp_path, name="store", redis_kind=None):
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(str(tmp_path / f"{name}.sqlite3"), commit_every=3, commit_secs=60)
    if kind == "sqlite-merging":
        return SqliteStore(
            str(tmp_path / f"{name}.sqlite3"), commit_every=3, commit_secs=60, merge_min_docs=2, merge_max_docs=2
        )
    if kind.startswith("redis"):
        from scrapy_neardup.store.redis import RedisStore

        server = shared_redis(tmp_path.parent, kind.partition("@")[2] or redis_kind)
        prefix = _prefixes.setdefault(f"{tmp_path}/{name}", f"test:{{{uuid.uuid4().hex}}}")
        return RedisStore(server.url, prefix=prefix, retries=1, backoff_secs=0.05)
    raise AssertionError(kind)


def stop_shared() -> None:
    """Stop the servers and clusters the session shared."""
    for server in _redis.values():
        server.stop()
    for cluster in _clusters.values():
        cluster.stop()
