"""How long a message takes to reach a process that has been idle, and to come back: the machine's floor
under the trip of a page to an extraction worker and of its result to the crawler.

    python3 dev.py bench bench/wake_latency.py [--rounds 400]

A worker process started as the crawl's workers are (``forkserver``) answers each message with 1 KB, as a
worker answers a page with its fingerprints. For bodies of 1, 30, 100 and 300 KB the parent sends one,
waits for the answer, then sleeps before the next: 0.2 ms (both processes barely idle), 2 ms, and 10 ms
(about one extraction: what a crawl one page at a time waits between its trips). Prints the median round
trip per body size and pause, in microseconds, as one JSON object. On a virtual machine a CPU that idles
longer sleeps deeper, and each wake-up costs more; the code on both sides is the same in every column.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing.connection import Connection

ANSWER = b"x" * 1024
SIZES = (1_000, 30_000, 100_000, 300_000)
PAUSES = (0.0002, 0.002, 0.010)


def answer(conn: Connection) -> None:
    while True:
        message = conn.recv_bytes()
        if not message:
            return
        conn.send_bytes(ANSWER)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400, help="round trips per body size and pause")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("forkserver")
    ours, theirs = ctx.Pipe()
    worker = ctx.Process(target=answer, args=(theirs,))
    worker.start()
    out: dict[str, dict[str, float]] = {}
    try:
        for pause in PAUSES:
            row = out[f"pause_{pause * 1000:g}_ms"] = {}
            for size in SIZES:
                body, trips = b"a" * size, []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    ours.send_bytes(body)
                    ours.recv_bytes()
                    trips.append(time.perf_counter() - started)
                    time.sleep(pause)
                row[f"{size // 1000}_kb_us"] = round(statistics.median(trips) * 1e6, 1)
    finally:
        ours.send_bytes(b"")
        worker.join()
    print(
        json.dumps(
            {
                "command": "bench/wake_latency.py " + " ".join(sys.argv[1:]),
                "rounds": args.rounds,
                "median_round_trip": out,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
