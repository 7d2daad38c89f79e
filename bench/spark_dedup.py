"""``dedup --engine spark`` against the local ``dedup``, on one machine, in one run.

    python3 dev.py bench bench/spark_dedup.py ../shared/neardup-dev [MORE_SETS...] [--repeat 3] [--executors]

Each labelled set (neardup-dev's format: ``manifest.jsonl`` and ``pages/``; ``bench/template_site.py OUT
--per 560`` makes one of 20,000 real-template pages) is written once as JSON lines ``{"url", "html"}``, then
deduplicated by the real CLI, process start-up included, ``--repeat`` times each, the engines alternating:
the local run (one worker a CPU) and the Spark job on ``local[N]`` (N = CPUs). The table gives the medians
and their ratio, the agreement of the two engines' clusters (the share of co-clustered pairs of either that
both have), F1 and precision against the labels, and Spark's shuffle bytes a document (from its event log).
``--executors`` adds the Spark job on ``local-cluster`` with one executor of one core, then two: separate
executor JVMs, as on a cluster.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from scrapy_neardup.offline.evaluation import load_manifest, score  # noqa: E402


def write_jsonl(dataset: str, path: str) -> int:
    """The set's pages as JSON lines, in the manifest's order; written once (kept beside for the next run)."""
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
    if not os.path.exists(path):
        with open(path + ".part", "w", encoding="utf-8") as out:
            for row in manifest:
                with open(os.path.join(dataset, row["file"]), "rb") as f:
                    data = f.read()
                html = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8", "replace")
                out.write(json.dumps({"url": row["url"], "html": html}) + "\n")
        os.replace(path + ".part", path)
    return len(manifest)


def run(jsonl: str, out_dir: str, engine: list[str]) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "scrapy_neardup.offline.cli",
        "dedup",
        jsonl,
        "-o",
        os.path.join(out_dir, "pairs.tsv"),
        "--clusters",
        os.path.join(out_dir, "clusters.jsonl"),
        *engine,
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    summary["wall"] = wall
    return summary


def co_clustered(path: str) -> set[frozenset[str]]:
    pairs: set[frozenset[str]] = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            members = json.loads(line)["members"]
            pairs.update(frozenset((a, b)) for i, a in enumerate(members) for b in members[i + 1 :])
    return pairs


def pairs_of(path: str) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [tuple(line.split("\t")[:2]) for line in f if line.strip()]  # type: ignore[misc]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def shuffle_bytes(event_dir: str) -> int:
    """Shuffle bytes written by every task of the Spark applications whose event logs are under ``event_dir``
    (written uncompressed: see the run's properties)."""
    total = 0
    for folder, _, files in os.walk(event_dir):
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if '"SparkListenerTaskEnd"' not in line:
                        continue
                    metrics = json.loads(line).get("Task Metrics") or {}
                    total += (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--executors", action="store_true", help="also one and two local-cluster executors")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "neardup-spark-bench"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    cpus = os.cpu_count() or 1
    quiet = ["--spark-conf", "spark.ui.enabled=false"]
    engines = {
        "local": [],
        f"spark local[{cpus}]": ["--engine", "spark", "--spark-master", f"local[{cpus}]", *quiet],
    }
    rows = []
    for dataset in args.datasets:
        name = os.path.basename(os.path.normpath(dataset))
        jsonl = os.path.join(args.work, f"{name}.jsonl")
        docs = write_jsonl(dataset, jsonl)
        manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
        walls: dict[str, list[float]] = {e: [] for e in engines}
        last: dict[str, dict] = {}
        for r in range(args.repeat):
            for engine, options in engines.items():
                out = os.path.join(args.work, name, engine.split()[0])
                last[engine] = run(jsonl, out, options)
                walls[engine].append(last[engine]["wall"])
                print(f"{name} round {r + 1} {engine}: {last[engine]['wall']:.1f} s", file=sys.stderr)
        local_dir, spark_dir = (os.path.join(args.work, name, e) for e in ("local", "spark"))
        a, b = (
            co_clustered(os.path.join(local_dir, "clusters.jsonl")),
            co_clustered(os.path.join(spark_dir, "clusters.jsonl")),
        )
        agreement = len(a & b) / len(a | b) if a | b else 1.0
        events = os.path.join(args.work, name, "events")
        os.makedirs(events, exist_ok=True)
        shutil.rmtree(events)
        os.makedirs(events)
        run(
            jsonl,
            os.path.join(args.work, name, "spark-events"),
            [
                *engines[f"spark local[{cpus}]"],
                "--spark-conf",
                "spark.eventLog.enabled=true",
                "--spark-conf",
                f"spark.eventLog.dir=file://{events}",
                "--spark-conf",
                "spark.eventLog.compress=false",
                "--spark-conf",
                "spark.eventLog.rolling.enabled=false",
            ],
        )
        shuffled = shuffle_bytes(events)
        scores = {
            e: score(manifest, pairs_of(os.path.join(d, "pairs.tsv")))
            for e, d in (("local", local_dir), ("spark", spark_dir))
        }
        row = {
            "set": name,
            "documents": docs,
            "local": statistics.median(walls["local"]),
            "spark": statistics.median(walls[f"spark local[{cpus}]"]),
            "local_range": (min(walls["local"]), max(walls["local"])),
            "spark_range": (min(walls[f"spark local[{cpus}]"]), max(walls[f"spark local[{cpus}]"])),
            "agreement": agreement,
            "identical": read(os.path.join(local_dir, "pairs.tsv")) == read(os.path.join(spark_dir, "pairs.tsv")),
            "f1": (scores["local"].f1, scores["spark"].f1),
            "precision": (scores["local"].precision, scores["spark"].precision),
            "shuffle_per_doc": shuffled / docs,
            "steps": last[f"spark local[{cpus}]"].get("steps"),
        }
        if args.executors:
            for n in (1, 2):
                master = f"local-cluster[{n},1,3072]"
                times = [
                    run(
                        jsonl,
                        os.path.join(args.work, name, f"exec{n}"),
                        ["--engine", "spark", "--spark-master", master, *quiet],
                    )["wall"]
                    for _ in range(max(1, args.repeat - 1))
                ]
                row[f"executors_{n}"] = statistics.median(times)
                print(f"{name} {master}: {times}", file=sys.stderr)
        rows.append(row)
    print(
        f"\n{cpus} CPUs, {time.strftime('%Y-%m-%d')}, medians of {args.repeat} runs (wall seconds, start-up included)\n"
    )
    print(
        "| set | documents | local dedup | spark local[N] | ratio | agreement | identical pairs | F1 local / spark "
        "| precision local / spark | shuffle bytes a document |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['documents']:,} "
            f"| {r['local']:.1f} ({r['local_range'][0]:.1f}-{r['local_range'][1]:.1f}) "
            f"| {r['spark']:.1f} ({r['spark_range'][0]:.1f}-{r['spark_range'][1]:.1f}) | {r['spark'] / r['local']:.2f} "
            f"| {r['agreement']:.4f} | {'yes' if r['identical'] else 'no'} | {r['f1'][0]:.4f} / {r['f1'][1]:.4f} "
            f"| {r['precision'][0]:.4f} / {r['precision'][1]:.4f} | {r['shuffle_per_doc']:,.0f} |"
        )
    for r in rows:
        print(f"\n{r['set']}: Spark's steps (last run): {r['steps']}")
        if "executors_1" in r:
            print(
                f"{r['set']}: local-cluster, one executor {r['executors_1']:.1f} s, two {r['executors_2']:.1f} s "
                f"({r['executors_1'] / r['executors_2']:.2f}x)"
            )


if __name__ == "__main__":
    main()
