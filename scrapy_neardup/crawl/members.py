"""This process as the roll of a crawl's processes names it (:class:`~scrapy_neardup.store.parts.RunningCrawl`),
and whether a process the roll names has died on this machine.

A process killed in the middle of its crawl (SIGKILL, the out-of-memory killer, a container stopped) never
leaves the roll; its beats only stop, and for :data:`~scrapy_neardup.store.parts.STALE_SECS` after the last
one a process that starts would join its crawl and take the pages it fetched as fetched in its own. On the
same machine the roll can tell at once: a name carries the machine's boot (``/proc/sys/kernel/random/boot_id``),
the PID namespace (the inode of ``/proc/self/ns/pid``), the pid and the process's start time in clock ticks
since boot (field 22 of ``/proc/<pid>/stat``, proc(5)), so a name whose pid is gone, or now belongs to a
process started at another time, is of a process that died. A name of another machine, of another PID
namespace (another container), or of a system without ``/proc`` is never judged: its beats decide, as before.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from functools import lru_cache

#: The largest pid Linux gives (``PID_MAX_LIMIT`` on 64-bit systems): a name with another is none of ours.
MAX_PID = 1 << 22


@dataclass(frozen=True)
class Member:
    """A crawl process on the roll: its host and pid (what the books name it by), a nonce, and where it can be
    judged: ``machine`` (boot and PID namespace; empty where this system cannot say) and ``ticks`` (its
    start, in clock ticks since boot)."""

    host: str
    pid: int
    nonce: str
    machine: str = ""
    ticks: int = 0

    @property
    def name(self) -> str:
        """The name on the roll: ``host:pid:nonce``, then ``/machine.ticks`` where the machine is known."""
        base = f"{self.host}:{self.pid}:{self.nonce}"
        return f"{base}/{self.machine}.{self.ticks}" if self.machine else base

    @classmethod
    def parse(cls, name: str) -> Member | None:
        """The member a roll's name is (``None``: not one this module made)."""
        base, marked, mark = name.partition("/")
        parts = base.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        host, pid, nonce = parts
        if not 0 < int(pid) <= MAX_PID:
            return None
        if not marked:
            return cls(host, int(pid), nonce)
        machine, _, ticks = mark.rpartition(".")
        if not machine or not ticks.isdigit():
            return None
        return cls(host, int(pid), nonce, machine, int(ticks))


@lru_cache(maxsize=1)
def this_machine() -> str:
    """This process's boot and PID namespace (``""`` where ``/proc`` does not tell them)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot[:16]}-{namespace}" if boot else ""


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; ``None`` when it has ended (no such process,
    or a zombie not yet reaped by its parent). Raises :class:`PermissionError` for a process that runs and
    cannot be read (another user's, under ``hidepid``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        os.kill(pid, 0)  # ProcessLookupError: no such process; PermissionError: one this process cannot see
        raise PermissionError(f"process {pid} runs, and its /proc entry cannot be read") from None
    if fields[0] in ("Z", "X"):  # field 3, the state: dead, its exit status not yet collected
        return None
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3, after the command in parentheses


def this_process() -> Member:
    """This process, named as no other process has been on this machine since it booted."""
    machine, ticks = this_machine(), None
    if machine:
        try:
            ticks = start_ticks(os.getpid())
        except (OSError, ValueError, IndexError):
            ticks = None
    if ticks is None:
        machine, ticks = "", 0
    return Member(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8], machine, ticks)


def died(name: str) -> bool:
    """Whether the process named ``name`` on the roll has died: only a name of this machine and PID namespace
    is judged (any other: ``False``, its beats decide), by whether its pid still runs the process that
    started at that time. A process that cannot be read (no permission) is taken to be alive."""
    member = Member.parse(name)
    if member is None or not member.machine or member.machine != this_machine():
        return False
    try:
        ticks = start_ticks(member.pid)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, IndexError, OverflowError):
        return False
    return ticks != member.ticks
