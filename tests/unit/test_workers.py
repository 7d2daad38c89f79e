"""Extraction in worker processes, tried for real: a worker SIGKILLed in the middle of a crawl costs only
the page it held; a page past the timeout is abandoned; no worker process outlives the crawler, whether it
finishes, drops pages by the dozen, is stopped with Ctrl-C, is SIGKILLed or stops on a store error."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers.crawlkit import (
    ServerThread,
    assert_no_process_left,
    crawl_pages,
    gated,
    pages_server,
    paths_crawl_command,
    read_result,
    wait_until,
)
from helpers.sitegen import article_page, slow_page

pytestmark = pytest.mark.slow

EXTENSIONS = json.dumps({"helpers.crawlkit.StatsToFile": 0, "helpers.crawlkit.WorkerWatch": 0})


def site(articles=30, copies=5, slow=("/slow",)):
    """Slow pages first (fetched first: the crawl order is FIFO), then articles, then copies of some."""
    pages = {path: slow_page() for path in slow}
    pages.update({f"/p/{i}": article_page(i) for i in range(articles)})
    pages.update({f"/copy/{i}": article_page(i) for i in range(copies)})
    return pages


def watched(tmp_path, **settings):
    return {"EXTENSIONS": EXTENSIONS, "TEST_PIDS_FILE": str(tmp_path / "pids.json"), "NEARDUP_WORKERS": "2", **settings}


def pids(tmp_path):
    return json.loads((tmp_path / "pids.json").read_text())


@pytest.mark.parametrize("reader", ["reactor", "pool thread"])
def test_a_worker_killed_mid_crawl_costs_only_its_page(tmp_path, reader):
    """Whoever reads the workers' results: the reactor (POSIX), or the pool's thread (elsewhere; here forced
    by a test extension, with the store's decisions then made on that thread)."""
    pages = site(articles=120)  # enough pages after the kill for the replacement worker to take some
    extensions = {"helpers.crawlkit.StatsToFile": 0, "helpers.crawlkit.WorkerWatch": 0}
    if reader == "pool thread":
        extensions["helpers.crawlkit.ThreadReader"] = 0
    result = crawl_pages(
        tmp_path,
        pages,
        watched(
            tmp_path,
            NEARDUP_ACTION="tag",
            CONCURRENT_REQUESTS="8",
            TEST_KILL_URL_SUFFIX="/slow",
            EXTENSIONS=json.dumps(extensions),
        ),
    )
    assert result.returncode == 0, result.log[-3000:]
    info = pids(tmp_path)
    assert info["reader"] == {"reactor": "ReactorIO", "pool thread": "ThreadIO"}[reader]
    assert len(info["killed"]) == 1  # the worker holding /slow, SIGKILLed while it extracted it
    stats = result.stats
    assert stats["finish_reason"] == "finished"
    assert stats["neardup/skipped/worker_lost"] == 1
    assert stats["neardup/checked"] == len(pages) - 1  # every other page got its verdict
    assert stats["neardup/duplicate"] == 5  # and the copies were still found, after the worker was replaced
    assert len(result.items) == len(pages)  # tag mode: nothing lost, the unchecked page passed on
    warnings = [line for line in result.log.splitlines() if "WARNING" in line and "/slow" in line]
    assert len(warnings) == 1 and "worker died (signal SIGKILL)" in warnings[0], warnings
    assert "neardup/skipped/worker_lost" in warnings[0]
    assert len(info["workers"]) == 3  # the dead worker was replaced, and the new one did the rest
    assert_no_process_left(info)


def test_a_page_past_the_timeout_is_abandoned_and_the_crawl_goes_on(tmp_path):
    """A page that takes trafilatura some 5 s (more on a loaded machine) against a limit of 1 s, which the
    other pages (a few milliseconds each) stay far under even beside a CPU hog on every core."""
    pages = site(articles=20, copies=3, slow=())
    pages["/slow"] = slow_page(20_000)
    pages = {"/slow": pages.pop("/slow"), **pages}  # fetched first
    result = crawl_pages(
        tmp_path,
        pages,
        watched(
            tmp_path,
            NEARDUP_ACTION="tag",
            CONCURRENT_REQUESTS="4",
            NEARDUP_WORKER_TIMEOUT="1.0",
            NEARDUP_MAX_BODY_SIZE=str(8 * 1024 * 1024),  # the slow page is 5 MB
        ),
    )
    assert result.returncode == 0, result.log[-3000:]
    stats = result.stats
    assert stats["neardup/skipped/timeout"] == 1
    assert stats["neardup/checked"] == len(pages) - 1
    assert stats["neardup/duplicate"] == 3
    assert "took longer than NEARDUP_WORKER_TIMEOUT" in result.log
    assert_no_process_left(pids(tmp_path))


def test_drop_mode_storm_of_ignored_requests_ends_cleanly(tmp_path):
    pages = {f"/same/{i}": article_page(1) for i in range(60)}
    result = crawl_pages(tmp_path, pages, watched(tmp_path, CONCURRENT_REQUESTS="16"))
    assert result.returncode == 0, result.log[-3000:]
    assert result.stats["neardup/dropped"] == 59 and len(result.items) == 1
    assert_no_process_left(pids(tmp_path))


def test_workers_recycled_after_max_tasks(tmp_path):
    pages = site(articles=24, copies=4, slow=())
    result = crawl_pages(tmp_path, pages, watched(tmp_path, NEARDUP_ACTION="tag", NEARDUP_WORKER_MAX_TASKS="5"))
    assert result.returncode == 0, result.log[-3000:]
    assert result.stats["neardup/checked"] == len(pages)
    assert result.stats["neardup/duplicate"] == 4
    assert "neardup/skipped/worker_lost" not in result.stats  # recycling loses nothing
    info = pids(tmp_path)
    assert len(info["workers"]) >= len(pages) // 5  # a new process every five pages
    assert_no_process_left(info)


def start_crawl(tmp_path, pages, **settings):
    server = ServerThread(pages_server(pages)).__enter__()
    cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, server.url, pages, watched(tmp_path, **settings))
    proc = subprocess.Popen(
        cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return server, proc, stats_file, items_file


def wait_for_workers(tmp_path, proc, count=2, timeout=60.0):
    """The worker pids as soon as the crawl has ``count`` of them (written by WorkerWatch as it sees them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the crawl ended early:\n{proc.stdout.read()[-3000:]}")
        path = tmp_path / "pids.json"
        if path.exists():
            try:
                info = json.loads(path.read_text())
            except ValueError:
                info = {"workers": []}
            if len(info["workers"]) >= count:
                return info
        time.sleep(0.05)
    raise AssertionError("no workers seen")


def gated_site(gate):
    """Slow pages, articles, and one page held back until ``gate`` is set: the crawl is still running when
    the test stops it, on a fast machine too."""
    pages = site(articles=150, copies=0, slow=tuple(f"/slow/{i}" for i in range(12)))
    pages["/held"] = gated(article_page(1000), gate)
    return pages


def test_ctrl_c_stops_the_crawl_and_its_workers(tmp_path):
    gate = threading.Event()
    server, proc, stats_file, items_file = start_crawl(tmp_path, gated_site(gate), CONCURRENT_REQUESTS="4")
    try:
        wait_for_workers(tmp_path, proc)
        time.sleep(1.0)  # into the slow pages
        proc.send_signal(signal.SIGINT)
        gate.set()  # the held page's download ends, so the graceful shutdown does not wait for it
        out, _ = proc.communicate(timeout=60)
    finally:
        gate.set()
        server.__exit__(None, None, None)
    result = read_result(proc.returncode, stats_file, items_file, out)
    assert result.stats.get("finish_reason") == "shutdown", out[-3000:]
    assert "Traceback" not in out, out[-5000:]
    assert_no_process_left(pids(tmp_path))


def test_a_crawler_killed_outright_leaves_no_worker(tmp_path):
    gate = threading.Event()
    server, proc, _, _ = start_crawl(tmp_path, gated_site(gate), CONCURRENT_REQUESTS="4")
    try:
        info = wait_for_workers(tmp_path, proc)
        time.sleep(0.5)
        info = json.loads((tmp_path / "pids.json").read_text())
        assert proc.poll() is None  # still crawling: the held page is not answered yet
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        gate.set()
        server.__exit__(None, None, None)
    assert info["workers"]
    assert_no_process_left(info)


def test_a_crawl_stopped_at_open_by_its_store_starts_no_worker(tmp_path):
    pages = site(articles=3, copies=0, slow=())
    first = crawl_pages(tmp_path, pages, watched(tmp_path, NEARDUP_MINHASH_NUM_PERM="64"), name="first")
    assert first.stats["finish_reason"] == "finished"
    (tmp_path / "pids.json").unlink()
    second = crawl_pages(tmp_path, pages, watched(tmp_path), name="second")
    assert second.refused_at_start("neardup_store_mismatch"), second.log[-3000:]
    assert not (tmp_path / "pids.json").exists() or pids(tmp_path)["workers"] == []


# -- the pool alone -------------------------------------------------------------------------------------
def page_result(pool, fn, *args, timeout=60):
    return pool.submit(fn, *args).result(timeout=timeout)


def test_a_real_segfault_costs_one_page(pool):
    from helpers.crawlkit import segfault

    from scrapy_neardup.workers import WorkerLost, analyze_html

    with pytest.raises(WorkerLost, match="SIGSEGV"):
        page_result(pool, segfault)
    # The next page goes to a new worker.
    wire = page_result(pool, analyze_html, article_page(1).encode(), "http://a.example/1", "text/html")
    assert wire[3] is not None  # a fingerprint came back


def test_large_bodies_cross_out_of_band_and_arrive_whole_between_small_tasks(pool):
    """A body from ``OUT_OF_BAND_BYTES`` on crosses the pipe as a message of its own (not copied into the
    pickle): bodies of every size around the cut, several in one task, in a row with small tasks."""
    from helpers.crawlkit import digests

    from scrapy_neardup.workers import OUT_OF_BAND_BYTES

    sizes = (0, 1, OUT_OF_BAND_BYTES - 1, OUT_OF_BAND_BYTES, 3 * 2**20)
    for size in sizes:
        args = (os.urandom(size), "http://a.example/", b"small")
        assert page_result(pool, digests, *args) == digests(*args)  # in the worker, and here
    args = (os.urandom(OUT_OF_BAND_BYTES + 7), None, os.urandom(200_000), bytearray(b"x" * 20))
    assert page_result(pool, digests, *args) == digests(*args)


def test_a_worker_killed_while_idle_is_replaced(pool):
    """A worker killed with no page: its pipe closes, a new worker takes its place, the next page goes to it."""
    from helpers.crawlkit import sleepy

    assert page_result(pool, sleepy, 0.01) == 0.01
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: pool.replaced == 1 and pool.pids() and pid not in pool.pids(),
        timeout=10,
        what="the killed worker replaced",
    )
    assert page_result(pool, sleepy, 0.02) == 0.02


def test_an_argument_made_at_send_is_made_when_a_worker_takes_the_page(pool):
    """A page waiting for a busy worker goes with what its caller knows when the worker takes it (a crawl's
    learned selectors change while pages wait), not when it was submitted; an argument that cannot be made
    fails its own page only."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.workers import PAGES_AHEAD, AtSend

    known = [0.01]

    def broken():
        raise ValueError("no selectors")

    busy = pool.submit(sleepy, 1.0)
    behind = [pool.submit(sleepy, 0.04) for _ in range(PAGES_AHEAD)]  # sent at once, to wait in the worker's pipe
    waiting = pool.submit(sleepy, AtSend(lambda: known[0]))
    failing = pool.submit(sleepy, AtSend(broken))
    after = pool.submit(sleepy, 0.03)
    known[0] = 0.02  # the one worker is asleep for a second: the pages from `waiting` on are in the queue
    assert busy.result(timeout=30) == 1.0
    assert [page.result(timeout=30) for page in behind] == [0.04] * PAGES_AHEAD
    assert waiting.result(timeout=30) == 0.02
    with pytest.raises(ValueError, match="no selectors"):
        failing.result(timeout=30)
    assert after.result(timeout=30) == 0.03


def test_pages_wait_for_a_busy_pool_and_a_death_costs_only_the_page_its_worker_held(pool):
    """One worker, a page it holds, ``PAGES_AHEAD`` pages sent behind it to wait in the worker's pipe, and one
    more waiting in the pool's queue; the worker is SIGKILLed while it holds the first (a real kill); that
    page fails, naming the signal, and the others (those in the dead worker's pipe were never begun) are
    extracted by its replacement, in the order they were submitted."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.workers import PAGES_AHEAD, WorkerLost

    first = pool.submit(sleepy, 5)
    ahead = [pool.submit(sleepy, 0.01 * (i + 1)) for i in range(PAGES_AHEAD)]
    last = pool.submit(sleepy, 0.5)
    wait_until(lambda: pool.running() and pool.running()[0][2][1] == (5,), timeout=10, what="the first page taken")
    worker = pool._workers[0]  # the pool's own state: white-box
    assert [page for page, _ in worker.behind] == ahead and [page for page, _ in pool._queue] == [last]
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerLost, match="SIGKILL"):
        first.result(timeout=30)
    assert [page.result(timeout=30) for page in ahead] == [0.01 * (i + 1) for i in range(PAGES_AHEAD)]
    assert last.result(timeout=30) == 0.5
    assert pool.replaced == 1 and pid not in pool.pids()


def test_every_result_reaches_its_own_page_while_two_threads_hand_pages_out(pool):
    """Pages are handed out by the thread that submits them and by the thread that reads results (here the
    pool's own). A page too large to wait in a pipe is handed out by the reader once the worker is idle; a
    small page submitted while the reader writes it must reach the pipe after it, whole, or results would
    be read back for the wrong pages. The reader's write of the large page is slowed down here, and the
    small page submitted in the middle of it."""
    from helpers.crawlkit import digests, sleepy

    (worker,) = pool._workers  # the pool's own state: white-box
    large = (os.urandom(worker.room + 1), "large")
    send = pool._send

    def slow_send(to, page, args):
        if threading.current_thread() is not threading.main_thread() and args[1] == large:
            time.sleep(0.3)
        send(to, page, args)

    pool._send = slow_send
    busy = pool.submit(sleepy, 0.5)
    behind = pool.submit(digests, b"behind")
    later = pool.submit(digests, *large)  # too large for the pipe: waits for the worker to be idle
    wait_until(lambda: pool.running() and pool.running()[0][2][1] == large, timeout=30, what="the large page out")
    small = pool.submit(digests, b"small")  # while the reader is still writing the large page
    assert busy.result(timeout=30) == 0.5 and behind.result(timeout=30) == digests(b"behind")
    assert later.result(timeout=30) == digests(*large)
    assert small.result(timeout=30) == digests(b"small")


def test_workers_are_recycled_after_max_tasks_and_stop_cleanly():
    from helpers.crawlkit import sleepy

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool

    extraction = ExtractionPool(Config.from_settings({}), 1, max_tasks=2)
    extraction.start()
    try:
        seen = set()
        for i in range(5):
            assert extraction.submit(sleepy, 0.001 * i).result(timeout=30) == 0.001 * i
            seen.update(extraction.pids())
        assert extraction.recycled == 2 and len(seen) == 3
        # All at once: no page is sent behind the last page of a worker to be recycled (it would stop first).
        pages = [extraction.submit(sleepy, 0.01 * i) for i in range(6)]
        assert [page.result(timeout=60) for page in pages] == [0.01 * i for i in range(6)]
        assert extraction.recycled == 5
        seen.update(extraction.pids())
    finally:
        extraction.close()
    assert_no_process_left({"workers": sorted(seen), "parents": [], "crawler": os.getpid()})


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="workers are spawned here")
def test_every_worker_starts_with_the_tokenizer_tables_the_fork_server_built():
    """The fork server builds the tokenizer's tables once; each worker it forks, a recycled one too, has them
    before its first page instead of building them on it."""
    from helpers.crawlkit import tokenizer_tables_built

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool

    extraction = ExtractionPool(Config.from_settings({}), 1, max_tasks=1)
    extraction.start()
    try:
        built = [extraction.submit(tokenizer_tables_built).result(timeout=60) for _ in range(3)]
        assert extraction.recycled >= 2
    finally:
        extraction.close()
    assert built == [True, True, True]


def test_only_pages_that_fit_in_its_pipe_wait_behind_another_and_closing_fails_them():
    """Pages wait in a worker's pipe behind the one it works on only as far as the pipe has room for their
    bytes in all (a send into a full pipe would block the reactor for as long as the worker's page takes);
    the others wait in the pool's queue, and are sent as the pipe empties. Closing the pool fails the pages in
    the pipe too."""
    from helpers.crawlkit import digests, sleepy

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import PAGES_AHEAD, ExtractionPool, WorkerLost

    assert PAGES_AHEAD >= 2
    extraction = ExtractionPool(Config.from_settings({}), 1)
    extraction.start()
    try:
        (worker,) = extraction._workers  # the pool's own state: white-box
        assert worker.room > 0
        running = extraction.submit(sleepy, 1.0)
        large = extraction.submit(digests, os.urandom(worker.room + 1), "http://a.example/", b"")
        assert not worker.behind and len(extraction._queue) == 1
        assert running.result(timeout=30) == 1.0
        large.result(timeout=30)
        running = extraction.submit(sleepy, 2.0)
        half = worker.room // 2 - 64  # with its URL, two fit in the room and three do not
        halves = [extraction.submit(digests, os.urandom(half), f"http://a.example/{i}", b"") for i in range(3)]
        assert [page for page, _ in worker.behind] == halves[:2] and 2 * half < worker.behind_bytes <= worker.room
        assert [page for page, _ in extraction._queue] == [halves[2]]
        assert running.result(timeout=30) == 2.0
        for page in halves:
            page.result(timeout=30)
        running = extraction.submit(sleepy, 5.0)
        small = [extraction.submit(sleepy, 0.01) for _ in range(PAGES_AHEAD + 1)]
        assert [page for page, _ in worker.behind] == small[:PAGES_AHEAD]
        assert [page for page, _ in extraction._queue] == small[PAGES_AHEAD:]
    finally:
        extraction.close()
    for page in (running, *small):
        with pytest.raises(WorkerLost, match="stopped"):
            page.result(timeout=30)


def test_a_pool_started_without_waiting_queues_pages_until_its_workers_are_up():
    """``start(wait=False)``, as a crawl starts its pool: the call returns before any worker is up (their
    start is held here until pages were submitted), the pages submitted meanwhile wait in the queue, and
    each reaches a worker once the workers are up, every result its own page's."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool

    extraction = ExtractionPool(Config.from_settings({}), 2)
    spawn, gate, seen = extraction._spawn, threading.Event(), set()

    def held_spawn():
        assert gate.wait(30), "the test never let the workers start"
        return spawn()

    extraction._spawn = held_spawn
    extraction.start(wait=False)
    try:
        assert extraction.pids() == []
        pages = [extraction.submit(sleepy, 0.01 * i) for i in range(8)]
        assert not any(page.done() for page in pages) and len(extraction._queue) == 8
        gate.set()
        assert [page.result(timeout=60) for page in pages] == [0.01 * i for i in range(8)]
        wait_until(lambda: len(extraction.pids()) == 2, timeout=30, what="both workers")
        seen.update(extraction.pids())
    finally:
        gate.set()
        extraction.close()
    assert_no_process_left({"workers": sorted(seen), "parents": [], "crawler": os.getpid()})


def test_a_pool_closed_while_its_workers_start_fails_its_pages_and_leaves_no_worker():
    """Closed before its workers are up (a crawl stopped at once): the pages waiting fail with
    :class:`WorkerLost`, and the worker that comes up after the close is stopped, not left running."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool, WorkerLost

    extraction = ExtractionPool(Config.from_settings({}), 1)
    spawn, gate, started = extraction._spawn, threading.Event(), []

    def held_spawn():
        assert gate.wait(30), "the test never let the worker start"
        worker = spawn()
        started.append(worker.process.pid)
        return worker

    extraction._spawn = held_spawn
    extraction.start(wait=False)
    page = extraction.submit(sleepy, 0.01)

    def open_once_closed():  # the worker comes up while close() is under way, whatever the machine's load
        wait_until(lambda: extraction._closed, timeout=30, what="the close")
        gate.set()

    threading.Thread(target=open_once_closed, daemon=True).start()
    extraction.close()
    with pytest.raises(WorkerLost, match="stopped"):
        page.result(timeout=30)
    assert len(started) == 1
    assert_no_process_left({"workers": started, "parents": [], "crawler": os.getpid()})


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="workers are spawned here")
def test_a_process_that_exits_without_closing_its_pool_starts_no_worker_on_its_way_out():
    """A process that exits without closing its pool (``scrapy shell -c`` ends so): ``multiprocessing`` stops
    its workers at exit, and the pool used to start one in place of each while the interpreter was going
    away: the user's terminal showed ``could not start an extraction worker: [Errno 2] No such file or
    directory`` (the fork server's socket already removed) or the fork server's ``EOFError`` traceback (the
    start cut off in the middle of its request). No worker starts once the interpreter exits. The script
    holds its exit until the pool has met the death of its worker (a handler of its own, run after
    ``multiprocessing``'s), so that a start made in its place always falls within the exit."""
    script = """
import atexit, sys, threading
met = threading.Event()
atexit.register(met.wait, 30)  # registered first, so run last: after multiprocessing stopped the worker
from scrapy_neardup.settings import Config
from scrapy_neardup.workers import ExtractionPool

pool = ExtractionPool(Config.from_settings({}), 1)
lost = pool._lost

def lost_and_met(worker):
    lost(worker)
    met.set()

pool._lost = lost_and_met
pool.start()
print(pool.pids()[0], flush=True)
sys.exit(0)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for said in ("Traceback", "EOFError", "could not start"):
        assert said not in done.stderr, done.stderr
    assert_no_process_left({"workers": [int(done.stdout)], "parents": [], "crawler": -1})


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="workers are spawned here")
def test_a_process_that_exits_while_a_worker_starts_lets_the_start_finish():
    """A process that exits while its pool starts a worker on a thread of the pool's own (``start(wait=False)``,
    as a crawl starts them; ``scrapy shell -c`` may be done with its page by then): the start is let finish,
    not cut off in the middle of its request to the fork server, which then died with an ``EOFError``
    traceback on the user's terminal. The fork server is made ready first (a pool started and closed), and
    the start's file descriptors are sent late, so that the exit always falls within the request."""
    script = """
import sys, threading, time
from multiprocessing import reduction
from scrapy_neardup.settings import Config
from scrapy_neardup.workers import ExtractionPool

ready = ExtractionPool(Config.from_settings({}), 1)
ready.start()
ready.close()
sending, sendfds = threading.Event(), reduction.sendfds

def late_sendfds(sock, fds):
    sending.set()
    time.sleep(0.5)
    return sendfds(sock, fds)

reduction.sendfds = late_sendfds
pool = ExtractionPool(Config.from_settings({}), 1)
pool.start(wait=False)
assert sending.wait(60), "the worker's start never reached the fork server"
sys.exit(0)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for said in ("Traceback", "EOFError", "could not start"):
        assert said not in done.stderr, done.stderr


def test_the_addon_starts_the_fork_server_only_for_a_crawl_with_workers():
    """The add-on has the workers' fork server start while Scrapy builds the crawl (it imports the extraction
    modules meanwhile), only when the plugin is enabled with worker processes; a bad setting is left to the
    crawl's start-up. Each case in a fresh interpreter: the fork server is one a process."""
    script = """
import sys
from multiprocessing import forkserver
from scrapy.settings import Settings
from scrapy_neardup import Addon
settings = Settings({k: v for k, v in (a.split("=", 1) for a in sys.argv[1:])})
Addon().update_settings(settings)
print(forkserver._forkserver._forkserver_pid is not None)
"""
    cases = {
        ("NEARDUP_ENABLED=True",): "True",
        ("NEARDUP_ENABLED=True", "NEARDUP_WORKERS=0"): "False",
        ("NEARDUP_ENABLED=False",): "False",
        ("NEARDUP_ENABLED=True", "NEARDUP_THRESHOLD=7"): "False",
    }
    for args, expected in cases.items():
        done = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, check=True
        )
        assert done.stdout.strip() == expected, (args, done.stdout, done.stderr)


def test_workers_run_at_the_niceness_they_are_given():
    """A crawl's workers run below the crawler's CPU priority (``NEARDUP_WORKER_NICE``): read back from the
    kernel for each worker process, the one that replaces a dead worker included; 0 leaves them as the
    crawler is."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool, WorkerLost

    own = os.getpriority(os.PRIO_PROCESS, 0)
    for nice in (0, 7):
        extraction = ExtractionPool(Config.from_settings({}), 2, nice=nice)
        extraction.start()
        try:
            both = [extraction.submit(sleepy, 0.2) for _ in range(2)]  # one each: both idle, so both answer
            assert [page.result(timeout=30) for page in both] == [0.2, 0.2]
            pids = extraction.pids()
            assert len(pids) == 2
            assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == [min(19, own + nice)] * 2
            held = extraction.submit(sleepy, 5)
            wait_until(lambda: extraction.running(), timeout=10, what="a page taken")
            os.kill(extraction.running()[0][0], signal.SIGKILL)
            with pytest.raises(WorkerLost):
                held.result(timeout=30)
            wait_until(lambda: len(extraction.pids()) == 2, timeout=30, what="the replacement")
            both = [extraction.submit(sleepy, 0.2) for _ in range(2)]  # one each: both idle, so both answer
            assert [page.result(timeout=30) for page in both] == [0.2, 0.2]
            assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in extraction.pids()] == [min(19, own + nice)] * 2
        finally:
            extraction.close()


def test_a_page_past_the_timeout_fails_and_the_worker_is_replaced(pool):
    from helpers.crawlkit import sleepy

    from scrapy_neardup.workers import WorkerTimeout

    pool.timeout = 0.3
    with pytest.raises(WorkerTimeout):
        page_result(pool, sleepy, 3)
    pool.timeout = 60.0  # the replacement's page must not meet the short limit on a loaded machine
    assert page_result(pool, sleepy, 0.01) == 0.01


def test_when_no_worker_can_be_started_pages_fail_instead_of_waiting(pool):
    """A worker dies and no new one can be started (fork failing is faked: it cannot be produced here for
    real, root ignores RLIMIT_NPROC): the page it held and the page waiting fail with WorkerLost at once,
    a page submitted meanwhile fails too, and once workers can start again pages are extracted."""
    from helpers.crawlkit import sleepy

    from scrapy_neardup.workers import WorkerLost

    held, waiting = pool.submit(sleepy, 5), pool.submit(sleepy, 0.01)
    wait_until(lambda: pool.running(), timeout=10, what="the first page taken")
    spawn = pool._spawn

    def cannot_fork():
        raise OSError(11, "Resource temporarily unavailable")

    pool._spawn = cannot_fork
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerLost, match="SIGKILL"):
        held.result(timeout=30)
    with pytest.raises(WorkerLost, match="no extraction worker could be started"):
        waiting.result(timeout=30)
    with pytest.raises(WorkerLost, match="no extraction worker could be started"):
        pool.submit(sleepy, 0.01).result(timeout=30)
    pool._spawn = spawn
    assert page_result(pool, sleepy, 0.03) == 0.03


def test_a_workers_result_says_when_its_job_began_on_this_processs_clock(pool):
    """``work_started`` is read from the machine's monotonic clock in the worker: it falls between the page's
    hand-over and its result here, so the trip to the worker can be told from the trip back."""
    from scrapy_neardup.engine.prepare import Prepared
    from scrapy_neardup.workers import analyze_html

    page_result(pool, analyze_html, article_page(2).encode(), "http://a.example/2", "text/html")  # started
    handed = time.perf_counter()
    prepared = Prepared.from_wire(
        page_result(pool, analyze_html, article_page(3).encode(), "http://a.example/3", "text/html")
    )
    read = time.perf_counter()
    assert prepared.fingerprint is not None
    assert 0 < prepared.work_seconds
    assert handed < prepared.work_started < prepared.work_started + prepared.work_seconds < read
