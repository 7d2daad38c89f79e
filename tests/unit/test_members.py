"""The names of a crawl's processes on the store's roll, and whether one of them died: judged on real
processes of this machine, killed for real."""

import os
import signal
import subprocess
import sys

import pytest

from scrapy_neardup.crawl.members import Member, died, start_ticks, this_machine, this_process

linux_proc = pytest.mark.skipif(not this_machine(), reason="needs /proc (boot id, PID namespace)")


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def name_of(process: subprocess.Popen) -> str:
    """The roll's name of a child process, as it would name itself."""
    return Member("here", process.pid, "0badcafe", this_machine(), start_ticks(process.pid) or 0).name


def test_a_name_reads_back_as_the_member_it_names():
    member = Member("crawler-7.example.org", 4242, "1f2e3d4c", "0123456789abcdef-4026531836", 987654)
    assert Member.parse(member.name) == member
    bare = Member("host", 12, "abcd")
    assert bare.name == "host:12:abcd" and Member.parse(bare.name) == bare
    for foreign in (
        "",
        "a",
        "host:pid:x",
        "p:1:2/",
        "host:1:n/machine.",
        "host:1:n/.12",
        "h:1:n/m.x",
        f"h:0:n/{this_machine()}.1",
        f"h:{2**70}:n/{this_machine()}.1",
    ):
        assert Member.parse(foreign) is None, foreign
        assert not died(foreign)


@linux_proc
def test_this_process_is_alive_and_named_as_no_other_process():
    me = this_process()
    assert me.pid == os.getpid() and me.machine == this_machine() and me.ticks == start_ticks(os.getpid())
    assert not died(me.name)
    assert this_process().name != me.name  # a nonce of its own each time


@linux_proc
def test_a_process_killed_is_dead_even_before_its_parent_reaps_it():
    child = sleeper()
    try:
        name = name_of(child)
        assert not died(name)
        child.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped: a zombie
        assert died(name)
    finally:
        child.kill()
        child.wait()
    assert died(name)  # reaped: its pid is gone


@linux_proc
def test_a_pid_that_runs_another_process_now_is_a_dead_member():
    child = sleeper()
    try:
        ticks = start_ticks(child.pid)
        assert ticks is not None
        reused = Member("here", child.pid, "0badcafe", this_machine(), ticks - 1).name
        assert died(reused)
    finally:
        child.kill()
        child.wait()


@linux_proc
def test_members_of_another_machine_or_namespace_are_left_to_their_beats():
    child = sleeper()
    child.kill()
    child.wait()
    for machine in ("ffffffffffffffff-4026531836", this_machine().split("-")[0] + "-1"):
        assert not died(Member("elsewhere", child.pid, "0badcafe", machine, 1).name)
    assert not died(Member("old-version", child.pid, "0badcafe").name)  # no machine: never judged
