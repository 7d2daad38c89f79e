import os
import sys
import uuid

import pytest

from scrapy_neardup.store import MemoryStore, SqliteStore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "example_project"))
sys.path.insert(0, HERE)

from redis_server import RedisServer, kind_named, server_kinds  # noqa: E402

#: Fixtures whose tests run once per Redis server kind.
_REDIS_FIXTURES = ("redis_kind", "redis_server", "redis_cluster", "shared_cluster")

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
#: server kind of the matrix (tests/redis_server.py).
STORE_BACKENDS = expand_backends(["memory", "sqlite", "sqlite-merging", "redis"])
#: Backends whose data outlives the process.
PERSISTENT_BACKENDS = expand_backends(["sqlite", "sqlite-merging", "redis"])


def pytest_generate_tests(metafunc):
    """Every test of a Redis server or cluster runs against each server kind (``redis_kind``)."""
    if "redis_kind" not in metafunc.fixturenames:
        return
    if any(m.args[0] == "redis_kind" for m in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("redis_kind", [k.name for k in server_kinds()], indirect=True)


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


def pytest_sessionfinish(session, exitstatus):
    for server in _redis.values():
        server.stop()
    for cluster in _clusters.values():
        cluster.stop()


@pytest.fixture
def redis_kind(request):
    """The name of the server kind this test runs against (one run per kind, see pytest_generate_tests)."""
    return request.param


@pytest.fixture
def redis_server(tmp_path, redis_kind):
    """A server of this test's own (for restarts and multi-process crawls), with an AOF on disk."""
    server = RedisServer(str(tmp_path / "redis"), persistent=True, kind=kind_named(redis_kind)).start()
    yield server
    server.stop()


@pytest.fixture
def shared_cluster(tmp_path_factory, redis_kind):
    """A real Redis Cluster of this test's server kind (three masters with a replica each) shared by the tests
    that leave its nodes running (each uses key prefixes of its own); a test that kills a node takes
    ``redis_cluster``."""
    from redis_cluster import RedisCluster

    if redis_kind not in _clusters:
        folder = tmp_path_factory.mktemp(f"cluster-{redis_kind}")
        _clusters[redis_kind] = RedisCluster(str(folder), masters=3, replicas=1, kind=kind_named(redis_kind)).start()
    return _clusters[redis_kind]


@pytest.fixture
def redis_cluster(tmp_path, redis_kind):
    """A real Redis Cluster of this test's server kind: three masters with a replica each."""
    from redis_cluster import RedisCluster

    cluster = RedisCluster(str(tmp_path / "cluster"), masters=3, replicas=1, kind=kind_named(redis_kind)).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pool():
    """A pool of one real extraction worker process, at the defaults, with a timeout of 5 s."""
    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool

    extraction = ExtractionPool(Config.from_settings({}), 1, timeout=5.0)
    extraction.start()
    yield extraction
    extraction.close()


@pytest.fixture(params=STORE_BACKENDS)
def store_kind(request):
    return request.param
