"""The Redis store's connection: redis-py's client or cluster client, calls retried on the faults that pass, the
Lua scripts loaded and run group by group on the masters that serve them."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from ..base import (
    StoreError,
    StoreUnavailableError,
    redact_url,
)
from .layout import BUCKET_BIN_BITS, GROUP_BITS, KeyLayout
from .scripts import SCRIPTS
from .transport import RedisErrors, packed_commands

logger = logging.getLogger("scrapy_neardup.store.redis")


class RedisConnection:
    """A connection to a Redis server or cluster for a store under ``prefix``: the URL, TLS, timeouts and
    retries, and the calls every part of the store makes through it (:meth:`call`, :meth:`_scripts`)."""

    def __init__(
        self,
        url: str,
        prefix: str = "neardup:{spider}",
        retries: int = 3,
        backoff_secs: float = 0.2,
        timeout_secs: float = 5.0,
        bucket_bins: int = 1 << (GROUP_BITS + BUCKET_BIN_BITS),
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        start_wait_secs: float = 0.0,
    ) -> None:
        super().__init__()  # the store's in-process parts, replaced by the store's own (a RedisStore)
        try:
            import redis
        except ImportError as exc:
            raise StoreError("The Redis store requires redis-py: pip install 'scrapy-neardup[redis]'") from exc
        self._redis_module = redis
        self._errors = RedisErrors(redis.exceptions)
        self.url = url
        self.prefix = prefix
        self.retries = retries
        self.backoff_secs = backoff_secs
        self.timeout_secs = timeout_secs
        self.start_wait_secs = start_wait_secs
        self.location = redact_url(url) + f" (keys {prefix}:*)"
        #: ``redis+cluster://host:port[,host:port...]/`` (``rediss+cluster://`` with TLS): a Redis Cluster through
        #: redis-py's cluster client.
        self.cluster = url.lower().startswith(("redis+cluster://", "rediss+cluster://"))
        #: TLS (``rediss://``, ``rediss+cluster://``): the CA that signed the server's certificate, and the
        #: client's certificate and key where the server asks for one (``tls-auth-clients``).
        self.tls = url.lower().startswith("rediss")
        self._tls_options: dict[str, Any] = {}
        if self.tls:
            self._tls_options = {
                k: v
                for k, v in (
                    ("ssl_ca_certs", tls_ca_file),
                    ("ssl_certfile", tls_cert_file),
                    ("ssl_keyfile", tls_key_file),
                )
                if v
            }
        if bucket_bins & (bucket_bins - 1) or not 1 << (GROUP_BITS + 6) <= bucket_bins <= 1 << (GROUP_BITS + 16):
            raise StoreError(
                f"bucket_bins must be a power of two from {1 << (GROUP_BITS + 6)} to "
                f"{1 << (GROUP_BITS + 16)}, got {bucket_bins}"
            )
        #: The layout of a new store (bucket bins from NEARDUP_REDIS_BUCKET_BINS); an existing store keeps its own.
        self.layout = KeyLayout(prefix, GROUP_BITS, bucket_bins.bit_length() - 1 - GROUP_BITS)
        self.client: Any = None
        self._sha: dict[str, str] = {}
        #: How often a server's lost script cache was loaded again (a restart, a failover, SCRIPT FLUSH).
        self.scripts_reloaded = 0
        self._nodes: dict[str, Any] = {}
        self._mean_bin = 0.0  # mean length of the bucket bins the last lookup met

    #: Whether the store is opened for a crawl or a run (:meth:`Store.open_existing`, maintenance, clears it).
    _create = True

    # -- plumbing ----------------------------------------------------------------------------------
    def connect(self) -> None:
        """Reach the server. Opened for a crawl or a run (not for maintenance), a server that does not answer
        is waited for up to ``start_wait_secs`` (``NEARDUP_REDIS_START_WAIT_SECS``), said in one WARNING line:
        a routine restart, or a server still loading its data, at the moment a crawl starts is ridden out as
        one mid-crawl is."""
        deadline = time.monotonic() + self.start_wait_secs
        said = False
        while True:
            try:
                self._connect_once()
                return
            except StoreUnavailableError as exc:
                left = deadline - time.monotonic()
                if not self._create or left <= 0:
                    if said:
                        raise StoreUnavailableError(f"{exc} (waited {self.start_wait_secs:g} s for it)") from exc
                    raise
                if not said:
                    logger.warning(
                        "scrapy-neardup: Redis at %s does not answer (%s); waiting up to %g s for it to come back "
                        "(NEARDUP_REDIS_START_WAIT_SECS)",
                        self.location,
                        exc.__cause__ or exc,
                        self.start_wait_secs,
                    )
                    said = True
                self.client = None
                time.sleep(min(0.5, left))

    def _connect_once(self) -> None:
        redis = self._redis_module
        if self.cluster:
            from redis.cluster import ClusterNode, RedisCluster

            if "{" not in self.prefix or "}" not in self.prefix.partition("{")[2]:
                raise StoreError(
                    f"NEARDUP_REDIS_KEY {self.prefix!r} has no hash tag: on a Redis Cluster the "
                    "prefix must hold one, such as 'neardup:{%(spider)s}'"
                )
            parts = urlsplit(self.url)
            user, _, password = parts.netloc.rpartition("@")[0].partition(":")
            nodes = []
            for address in parts.netloc.rpartition("@")[2].split(","):
                host, _, port = address.rpartition(":")
                nodes.append(ClusterNode(host or "127.0.0.1", int(port or 6379)))
            # The client reaches the cluster as it is made: through call, so that an unreachable cluster is
            # a StoreError (retried, then said in one line), as an unreachable server is.
            self.client = self.call(
                RedisCluster,
                startup_nodes=nodes,
                username=unquote(user) or None,
                password=unquote(password) or None,
                socket_timeout=self.timeout_secs,
                socket_connect_timeout=self.timeout_secs,
                **({"ssl": True, **self._tls_options} if self.tls else {}),
            )
        else:
            self.client = redis.Redis.from_url(
                self.url,
                socket_timeout=self.timeout_secs,
                socket_connect_timeout=self.timeout_secs,
                **self._tls_options,
            )
        self.call(self.client.ping)
        self._load_scripts()
        if self.cluster:
            return  # the cluster client sends writes to the masters
        # A store that cannot be written is found now, not after pages were given verdicts it cannot keep.
        replication = self.call(self.client.info, "replication")
        if replication.get("role") in ("slave", "replica"):
            raise StoreError(
                f"Redis at {self.location} is a read-only replica (of "
                f"{replication.get('master_host')}:{replication.get('master_port')}): point "
                "NEARDUP_STORE_URL at the master"
            )

    def _load_scripts(self) -> None:
        """Load the scripts on every master (a cluster client sends SCRIPT LOAD to all of them)."""
        self._sha = {name: self.call(self.client.script_load, body) for name, body in SCRIPTS.items()}

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call with bounded retries and exponential back-off on faults that pass (see
        :class:`RedisErrors`); a server that lost its scripts gets them again and the call is repeated.

        Retrying is safe: every script is idempotent (a step whose reply was lost finds its own writes
        and returns what the first try would have)."""
        delay = self.backoff_secs
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except self._errors.redis_error as exc:
                kind = self._errors.classify(exc, self.cluster)
                if kind == "refused":
                    raise StoreError(
                        f"Redis at {self.location} refused the credentials or the command: {type(exc).__name__}: {exc}"
                    ) from exc
                if kind == "readonly":
                    raise StoreError(
                        f"Redis at {self.location} is a read-only replica now ({exc}): point "
                        "NEARDUP_STORE_URL at the master"
                    ) from exc
                if kind == "fatal":
                    raise StoreError(f"Redis error at {self.location}: {type(exc).__name__}: {exc}") from exc
                failure = exc
                state = {"noscript": "without its scripts", "unreachable": "unreachable"}.get(kind, "unavailable")
                if kind == "noscript":
                    # A server that lost its script cache (a restart: Redis 7+ and Valkey keep no scripts in
                    # the AOF; a promoted replica; SCRIPT FLUSH): load them again, and repeat the call now.
                    try:
                        self._load_scripts()
                    except StoreError as reload_failure:
                        failure = reload_failure
                    else:
                        self.scripts_reloaded += 1
                        if attempt < self.retries:
                            continue
            if attempt == self.retries:
                raise StoreUnavailableError(
                    f"Redis at {self.location} {state} after {attempt + 1} tries: {type(failure).__name__}: {failure}"
                ) from failure
            logger.debug("Redis call failed (%s: %s); retrying in %.2fs", type(failure).__name__, failure, delay)
            time.sleep(delay)
            if self.cluster:
                self._refresh_slots()
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def _refresh_slots(self) -> None:
        """Ask the surviving nodes which master serves which slots (after a failover, the promoted
        replica); a pipeline does not do it by itself."""
        self._nodes.clear()
        if self.client is None:  # the cluster client is being made: making it again asks the nodes
            return
        try:
            self.client.nodes_manager.initialize()
        except self._redis_module.RedisError as exc:  # no node answers yet: the next try asks again
            logger.debug("Redis Cluster slots not refreshed: %s", exc)

    def _node_of(self, key: str) -> Any:
        """The master that serves ``key``'s slot, as last known (forgotten when the slots are asked again)."""
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = self.client.get_node_from_key(key)
        return node

    def _scripts(self, name: str, calls: Mapping[int, Sequence[Any]]) -> dict[int, Any]:
        """Run group script ``name`` for each group of ``calls`` (group -> arguments after the tag); the
        replies by group. One call per server: on a cluster, one per master for the groups it serves, sent to
        every master at once (:meth:`_on_masters`). A script may touch keys of several slots when they are
        all on its server (Redis allows it to scripts without a shebang, 6.x and 7.x alike); if one has
        moved meanwhile, the call fails with "non local key" and is retried on the new slot map."""
        if not calls:
            return {}
        width = 1 + len(next(iter(calls.values())))
        sha, route, tags = self._sha[name], self.layout.route, self.layout.tags

        def command(groups: list[int]) -> tuple[Any, ...]:
            args: list[Any] = []
            for g in groups:
                args += [tags[g], *calls[g]]
            return ("EVALSHA", sha, 1, route[groups[0]], len(groups), width, *args)

        def run() -> dict[int, Any]:
            if not self.cluster:
                groups = list(calls)
                return dict(zip(groups, self.client.execute_command(*command(groups))))
            by_master: dict[str, list[int]] = defaultdict(list)
            for g in calls:
                by_master[self._node_of(route[g]).name].append(g)
            parts = list(by_master.values())
            replies = self._on_masters([(route[groups[0]], command(groups)) for groups in parts])
            return {g: r for groups, reply in zip(parts, replies) for g, r in zip(groups, reply)}

        return self.call(run)

    def _on_masters(self, commands: Sequence[tuple[str, tuple[Any, ...] | bytes]]) -> list[Any]:
        """Each command (with the key it is routed by) sent to the master of its slot (on one server, to it):
        everything is sent to every master first, then the replies are read, so the masters work at once.
        redis-py's cluster pipeline does the same with far more work per command; a failover or a moved
        slot raises, and :meth:`call` asks for the slots again and retries."""
        by_node: dict[str, list[int]] = defaultdict(list)
        nodes: dict[str, Any] = {}
        for i, (key, _) in enumerate(commands):
            node = self._node_of(key) if self.cluster else None
            name = node.name if node is not None else ""
            nodes[name] = node
            by_node[name].append(i)
        replies: list[Any] = [None] * len(commands)
        sent = []
        failure: Exception | None = None
        try:
            for name, indices in by_node.items():
                client = self.client.get_redis_connection(nodes[name]) if self.cluster else self.client
                try:
                    conn = client.connection_pool.get_connection()
                except TypeError:  # redis-py before 5.3 names the command
                    conn = client.connection_pool.get_connection("EVALSHA")
                sent.append((client, conn, indices))
                conn.send_packed_command(packed_commands(conn, [commands[i][1] for i in indices]))
            for client, conn, indices in sent:
                for i in indices:
                    try:  # the connection's own reader: no reply of these commands needs a callback
                        replies[i] = conn.read_response()
                    except self._redis_module.ResponseError as exc:  # read every reply: the socket stays in step
                        failure = failure or exc
        except BaseException:
            for _, conn, _ in sent:
                conn.disconnect()
            raise
        finally:
            for client, conn, _ in sent:
                client.connection_pool.release(conn)
        if failure is not None:
            raise failure
        return replies

    def _meta_script(self, name: str, *args: Any) -> Any:
        """A script on ``P``'s slot (four a batch): straight to its master's connection, as the group
        scripts go, not through the cluster client's command routing (a third of these calls' cost)."""
        meta = self.key_of("meta")
        return self.call(
            lambda: self._on_masters([(meta, ("EVALSHA", self._sha[name], 1, meta, self.prefix, *args))])[0]
        )

    def key_of(self, name: str) -> str:
        """The store's own key ``name``: ``P:name``."""
        return f"{self.prefix}:{name}"

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
