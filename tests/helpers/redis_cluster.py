"""Start a real Redis Cluster on 127.0.0.1 for the tests: ``masters`` masters and ``replicas`` replicas each,
made by ``redis-cli --cluster create`` (``valkey-cli``) from one server kind of :mod:`redis_server`."""

from __future__ import annotations

import os
import subprocess
import time

from .redis_server import RedisServer, ServerKind, default_kind, free_port


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ClusterNode(RedisServer):
    """A ``redis-server`` with ``cluster-enabled yes``."""

    def __init__(self, directory: str, node_timeout_ms: int = 2000, kind: ServerKind | None = None) -> None:
        port = free_port()
        while port > 55_000 or not _free(port + 10_000):  # the cluster bus listens on port + 10000
            port = free_port()
        super().__init__(directory, port=port, kind=kind)
        self.node_timeout_ms = node_timeout_ms

    def extra_args(self) -> list[str]:
        return [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            os.path.join(self.directory, "nodes.conf"),
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            "--appendonly",
            "no",
        ]


class RedisCluster:
    def __init__(self, directory: str, masters: int = 3, replicas: int = 0, kind: ServerKind | None = None) -> None:
        self.kind = kind or default_kind()
        self.directory = directory
        self.masters, self.replicas = masters, replicas
        self.nodes: list[ClusterNode] = []

    @property
    def url(self) -> str:
        """Seed nodes in the form ``redis+cluster://host:port,host:port/``."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/"

    def start(self, timeout: float = 60.0) -> RedisCluster:
        count = self.masters * (1 + self.replicas)
        try:
            for i in range(count):
                self.nodes.append(ClusterNode(os.path.join(self.directory, f"node{i}"), kind=self.kind).start())
            self._create(timeout)
        except BaseException:
            self.stop()  # no node outlives a cluster that could not be made
            raise
        return self

    def _create(self, timeout: float) -> None:
        subprocess.run(
            [
                self.kind.cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        deadline = time.monotonic() + timeout
        import redis

        while time.monotonic() < deadline:
            if all(self._ready(redis.Redis(port=node.port)) for node in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok with every replica in sync")

    @staticmethod
    def _ready(client) -> bool:  # type: ignore[no-untyped-def]
        """The node sees the cluster as ok and, a replica, has finished its first sync with its master: a
        replica that has not would refuse to take over a master killed by a test (its data too old)."""
        try:
            info = client.cluster("info")
            ok = info.get("cluster_state") == "ok" if isinstance(info, dict) else b"cluster_state:ok" in info
            replication = client.info("replication")
        finally:
            client.close()
        return ok and (replication.get("role") != "slave" or replication.get("master_link_status") == "up")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
