import os

import pytest
from helpers.redis_server import RedisServer, kind_named, server_kinds
from helpers.stores import STORE_BACKENDS, _clusters, stop_shared

#: Fixtures whose tests run once per Redis server kind.
_REDIS_FIXTURES = ("redis_kind", "redis_server", "redis_cluster", "shared_cluster")


#: Test files that crawl over a Redis store (or a cluster): the plugin's answer to the store is under test, on
#: one server kind (the newest found). ``NEARDUP_TEST_MATRIX=all`` runs them on every kind; ``=rest`` runs only
#: them, on the kinds left out (``.ci/run``'s matrix step, after the README's command). The store's own tests
#: (its protocol on each server build) always run on every kind.
_CRAWLS_OVER_A_STORE = ("tests/crawl/", "tests/store/test_redis_production.py")
_MATRIX = os.environ.get("NEARDUP_TEST_MATRIX", "")


def _kinds_for(path) -> list[str]:
    kinds = [k.name for k in server_kinds()]
    crawls = any(part in str(path).replace(os.sep, "/") for part in _CRAWLS_OVER_A_STORE)
    if crawls and _MATRIX == "rest":
        return kinds[:-1]
    if crawls and _MATRIX != "all":
        return kinds[-1:]
    return kinds


def pytest_collection_modifyitems(config, items):
    """``NEARDUP_TEST_MATRIX=rest``: only the crawls over a store, on the kinds the default run leaves out."""
    if _MATRIX != "rest":
        return
    default = server_kinds()[-1].name
    wanted = [
        item
        for item in items
        if any(part in item.nodeid for part in _CRAWLS_OVER_A_STORE)
        and getattr(item, "callspec", None) is not None
        and item.callspec.params.get("redis_kind", default) != default
    ]
    config.hook.pytest_deselected(items=[item for item in items if item not in wanted])
    items[:] = wanted


def pytest_generate_tests(metafunc):
    """Every test of a Redis server or cluster runs against each server kind (``redis_kind``); a crawl over
    a store on one (see ``_CRAWLS_OVER_A_STORE``)."""
    if "redis_kind" not in metafunc.fixturenames:
        return
    if any(m.args[0] == "redis_kind" for m in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("redis_kind", _kinds_for(metafunc.definition.path), indirect=True)


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
