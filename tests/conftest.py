import os
import sys
import uuid

import pytest

from scrapy_neardup.store import MemoryStore, SqliteStore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "example_project"))
sys.path.insert(0, HERE)

from redis_server import RedisServer  # noqa: E402

#: "sqlite-merging" is the SQLite store merging its staged documents into the band index every second
#: document, so that every contract test also runs across merges.
STORE_BACKENDS = ["memory", "sqlite", "sqlite-merging", "redis"]
#: Backends whose data outlives the process.
PERSISTENT_BACKENDS = ["sqlite", "sqlite-merging", "redis"]

_redis: RedisServer | None = None
_prefixes: dict[str, str] = {}


def shared_redis(tmp_root) -> RedisServer:
    """One redis-server for the whole session (each test uses its own key prefix)."""
    global _redis
    if _redis is None:
        _redis = RedisServer(str(tmp_root / "redis-shared")).start()
    return _redis


def make_store(kind, tmp_path, name="store"):
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(str(tmp_path / f"{name}.sqlite3"), commit_every=3, commit_secs=60)
    if kind == "sqlite-merging":
        return SqliteStore(str(tmp_path / f"{name}.sqlite3"), commit_every=3, commit_secs=60,
                           merge_min_docs=2, merge_max_docs=2)
    if kind == "redis":
        from scrapy_neardup.store.redis import RedisStore

        server = shared_redis(tmp_path.parent)
        prefix = _prefixes.setdefault(f"{tmp_path}/{name}", f"test:{{{uuid.uuid4().hex}}}")
        return RedisStore(server.url, prefix=prefix, retries=1, backoff_secs=0.05)
    raise AssertionError(kind)


def pytest_sessionfinish(session, exitstatus):
    if _redis is not None:
        _redis.stop()


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of this test's own (for restarts and multi-process crawls), with an AOF on disk."""
    server = RedisServer(str(tmp_path / "redis"), persistent=True).start()
    yield server
    server.stop()


@pytest.fixture(params=STORE_BACKENDS)
def store_kind(request):
    return request.param


@pytest.fixture
def pool():
    """A pool of one real extraction worker process, at the defaults, with a timeout of 5 s."""
    from scrapy_neardup._config import Config
    from scrapy_neardup.crawl.workers import ExtractionPool

    extraction = ExtractionPool(Config.from_settings({}), 1, timeout=5.0)
    extraction.start()
    yield extraction
    extraction.close()
