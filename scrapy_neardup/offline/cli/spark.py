"""``scrapy-neardup dedup --engine spark``: the options, the outputs and the summary of the local run, the
work done by a Spark job (:mod:`scrapy_neardup.offline.spark`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ...assembly import build_algorithm
from .common import config_of
from .parser import settings_from_args

#: Options of the local run that a Spark job has no use for, with why.
_LOCAL_ONLY = (
    ("all_pairs", "--all-pairs", "it compares every pair of a group, which a distributed run does not hold"),
    ("store_class", "--store-class", "a Spark run keeps no store between runs"),
    ("reset", "--reset", "a Spark run keeps no store between runs"),
    ("workers", "--workers", "Spark's executors do the work: size them with --spark-master or --spark-conf"),
)


def refusal(args: argparse.Namespace) -> str | None:
    """Why these options cannot run on Spark, in one line; ``None`` when they can."""
    for name, option, why in _LOCAL_ONLY:
        if getattr(args, name, None):
            return f"{option} cannot be used with --engine spark: {why}"
    if args.store not in (None, "memory://"):
        return "--store cannot be used with --engine spark: a Spark run keeps no store between runs"
    return None


def _last_line(exc: BaseException) -> str:
    """What a Spark error says last (a Python error in an executor comes with its whole traceback)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def cmd_dedup_spark(args: argparse.Namespace) -> int:
    from ..inputs import InputError
    from ..spark import SparkUnavailable, check_spark
    from .outputs import cluster_line, nothing_read, open_outputs, pair_line, summary_line

    why = refusal(args)
    if why:
        raise SystemExit(f"scrapy-neardup: {why}")
    config = config_of(settings_from_args(args))
    try:
        check_spark()
    except SparkUnavailable as exc:
        raise SystemExit(f"scrapy-neardup: {exc}") from None
    if args.parquet and os.path.exists(args.parquet):
        raise SystemExit(f"scrapy-neardup: {args.parquet}: already exists; --parquet writes a new directory")
    warning = build_algorithm(config).scale_warning()
    if warning:
        print(f"scrapy-neardup: {warning}", file=sys.stderr)

    from ..inputs import check_inputs
    from ..spark.job import SPARK_ERRORS, SparkOptions, run, session
    from ..spark.tasks import ReadOptions, is_hadoop_path

    check_inputs([path for path in args.inputs if not is_hadoop_path(path)])  # before a JVM starts

    outputs = open_outputs(args)
    options = SparkOptions(args.spark_master, dict(args.spark_conf), args.partitions, args.parquet)
    read = ReadOptions(config.max_body_size, args.warc_reader, args.allow_truncated)
    started = time.perf_counter()
    try:
        spark = session(options)
    except SPARK_ERRORS as exc:
        for output in outputs:
            output.discard()
        where = f"master {args.spark_master}" if args.spark_master else "its default master"
        raise SystemExit(f"scrapy-neardup: Spark did not start on {where}: {_last_line(exc)}") from None
    try:
        out = outputs[0].file

        def write_pair(pair) -> None:
            out.write(pair_line(pair))

        def write_cluster(cluster) -> None:
            outputs[1].file.write(cluster_line(list(cluster.members)))

        try:
            summary = run(
                spark,
                config,
                args.inputs,
                read,
                args.cluster_mode,
                options,
                write_pair,
                write_cluster if args.clusters else None,
            )
        except SPARK_ERRORS as exc:
            raise SystemExit(
                f"scrapy-neardup: the Spark job failed, nothing written: {_last_line(exc)} (Spark's log says more)"
            ) from None
        counts = summary.counts
        if summary.documents == 0 and not args.allow_empty:
            raise InputError(nothing_read(args.inputs, counts))
        for output in outputs:
            output.commit()
    finally:
        for output in outputs:
            output.discard()
        spark.stop()
    for path in counts.truncated:
        print(
            f"scrapy-neardup: {path}: TRUNCATED: the file ends inside a record; what came before the cut was "
            "used (--allow-truncated), the rest of the file is lost",
            file=sys.stderr,
        )
    report = summary_line(summary, counts, time.perf_counter() - started)
    report.update(engine="spark", steps=summary.steps)
    print(json.dumps(report), file=sys.stderr)
    return 0
