import pytest
from helpers.redis_server import RedisServer, kind_named, server_kinds
from helpers.stores import STORE_BACKENDS, _clusters, stop_shared

#: Fixtures whose tests run once per Redis server kind.
_REDIS_FIXTURES = ("redis_kind", "redis_server", "redis_cluster", "shared_cluster")


def pytest_generate_tests(metafunc):
    """Every test of a Redis server or cluster runs against each server kind (``redis_kind``)."""
    if "redis_kind" not in metafunc.fixturenames:
        return
    if any(m.args[0] == "redis_kind" for m in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("redis_kind", [k.name for k in server_kinds()], indirect=True)


def pytest_sessionfinish(session, exitstatus):
    stop_shared()


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
    from helpers.redis_cluster import RedisCluster

    if redis_kind not in _clusters:
        folder = tmp_path_factory.mktemp(f"cluster-{redis_kind}")
        _clusters[redis_kind] = RedisCluster(str(folder), masters=3, replicas=1, kind=kind_named(redis_kind)).start()
    return _clusters[redis_kind]


@pytest.fixture
def redis_cluster(tmp_path, redis_kind):
    """A real Redis Cluster of this test's server kind: three masters with a replica each."""
    from helpers.redis_cluster import RedisCluster

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
