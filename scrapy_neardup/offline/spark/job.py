"""The Spark job of ``dedup --engine spark``: the driver's side. The steps and why they are so: see the
package's docstring; what runs on the executors: :mod:`.tasks`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...settings import Config
from ..inputs import InputError, check_inputs
from .components import connected_components
from .tasks import (
    ClusterRow,
    ComponentResult,
    DeclaredBy,
    Member,
    PairRow,
    PreparedDocument,
    ReadCounts,
    ReadOptions,
    Split,
    Verifier,
    candidate_pairs,
    decide_component,
    is_hadoop_path,
    plan_splits,
    prepare_documents,
    read_file_bytes,
    read_split,
)

#: Plain JSONL files are read in ranges of this many bytes (Hadoop's text input splits by block the same way).
SPLIT_BYTES = 32 << 20


@dataclass(frozen=True)
class SparkOptions:
    """Where and how the job runs: the master URL (``None``: what ``spark-submit`` or the environment set,
    else ``local[*]``), extra Spark properties, the partitions of the prepared documents, and a directory
    for Parquet copies of the outputs."""

    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    partitions: int | None = None
    parquet: str | None = None


@dataclass
class SparkSummary:
    """What the run read and decided: the local CLI's summary, field for field."""

    documents: int = 0
    unique: int = 0
    duplicate: int = 0
    seen: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    counts: ReadCounts = field(default_factory=ReadCounts)


def session(options: SparkOptions) -> SparkSession:
    """The Spark session: the one ``spark-submit`` started (its master and properties stand), or a new one on
    ``options.master`` (``local[*]`` by default). A local master's executors run this Python; a cluster's
    run what the cluster is given (docs/scaling.md)."""
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    master = options.master or options.conf.get("spark.master") or (None if submitted else "local[*]")
    builder = SparkSession.builder.appName("scrapy-neardup dedup")
    if master and (options.master or not submitted):
        builder = builder.master(master)
    defaults = {"spark.ui.showConsoleProgress": "false"}
    if master and master.startswith("local"):
        # PySpark starts its workers with PYSPARK_PYTHON (else "python3" on PATH): this Python has the package.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if master.startswith("local-cluster") and not os.environ.get("SPARK_HOME"):
            import pyspark

            # Executors of local-cluster are started from Spark's home: pip's PySpark is one.
            os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    for key, value in {**defaults, **options.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _hadoop_files(spark: SparkSession, paths: list[str]) -> list[str]:
    """The files a Hadoop path names (a file, a directory's files, a glob's matches), as Spark names them."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    files: list[str] = []
    for path in paths:
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        fs = hpath.getFileSystem(conf)
        statuses = fs.globStatus(hpath)
        if not statuses:
            raise InputError(f"{path}: no such file")
        for status in statuses:
            if status.isDirectory():
                inner = sorted(str(s.getPath().toString()) for s in fs.listStatus(status.getPath()) if s.isFile())
                files.extend(f for f in inner if not os.path.basename(f).startswith(("_", ".")))
            else:
                files.append(str(status.getPath().toString()))
    return files


def _read(
    spark: SparkSession, inputs: list[str], read: ReadOptions, config: Config, partitions: int
) -> Any:
    """The prepared documents and read counts of every input file, an RDD persisted for the steps after."""
    sc = spark.sparkContext
    local = [p for p in inputs if not is_hadoop_path(p)]
    check_inputs(local)
    hadoop = _hadoop_files(spark, [p for p in inputs if is_hadoop_path(p)])
    index = {path: i for i, path in enumerate(inputs)}
    splits = [
        Split(index[s.path], s.path, s.start, s.end) for s in plan_splits(local, SPLIT_BYTES, partitions)
    ]
    parts = []
    if splits:
        parts.append(sc.parallelize(splits, len(splits)).flatMap(lambda s: read_split(s, read)))
    if hadoop:
        first = len(inputs)
        order = {path: first + i for i, path in enumerate(hadoop)}
        parts.append(
            sc.binaryFiles(",".join(hadoop), minPartitions=len(hadoop)).flatMap(
                lambda named: read_file_bytes(order.get(named[0], first), named[0], named[1], read)
            )
        )
    items = parts[0] if len(parts) == 1 else sc.union(parts)
    if items.getNumPartitions() < partitions:
        # Few files (WARC files are read whole): their documents spread over the executors for the costly part.
        items = items.repartition(partitions)
    return items.mapPartitions(lambda part: prepare_documents(config, part)).persist(StorageLevel.MEMORY_AND_DISK)


def _summarise(items: Iterator[Any]) -> Iterator[SparkSummary]:
    summary = SparkSummary()
    for item in items:
        if isinstance(item, ReadCounts):
            summary.counts = summary.counts + item
        else:
            summary.documents += 1
            if not item.fingerprinted:
                summary.skipped[item.skip_reason] = summary.skipped.get(item.skip_reason, 0) + 1
    yield summary


def _merge(a: SparkSummary, b: SparkSummary) -> SparkSummary:
    skipped = dict(a.skipped)
    for reason, n in b.skipped.items():
        skipped[reason] = skipped.get(reason, 0) + n
    return SparkSummary(a.documents + b.documents, 0, 0, 0, skipped, a.counts + b.counts)


_EDGE = T.StructType([T.StructField("a", T.LongType(), False), T.StructField("b", T.LongType(), False)])


def _edges(spark: SparkSession, docs: Any, config: Config) -> DataFrame:
    """Pairs of documents whose decisions may depend on each other: verified candidate pairs of a shared LSH
    bucket, and documents of one URL (a page met twice is *seen*, or re-checked, against its record)."""
    buckets = spark.createDataFrame(
        docs.flatMap(lambda d: [(key, d.position) for key in d.bucket_keys()]),
        T.StructType([T.StructField("bucket", T.LongType(), False), T.StructField("position", T.LongType(), False)]),
    )
    shared = buckets.groupBy("bucket").agg(F.collect_list("position").alias("members")).where(F.size("members") > 1)
    candidates = spark.createDataFrame(shared.rdd.flatMap(lambda row: candidate_pairs(row.members)), _EDGE).distinct()
    signatures = spark.createDataFrame(
        docs.map(lambda d: (d.position, list(d.signatures()))),
        T.StructType(
            [
                T.StructField("position", T.LongType(), False),
                T.StructField("signatures", T.ArrayType(T.BinaryType()), False),
            ]
        ),
    )
    joined = candidates.join(
        signatures.withColumnRenamed("position", "a").withColumnRenamed("signatures", "sa"), "a"
    ).join(signatures.withColumnRenamed("position", "b").withColumnRenamed("signatures", "sb"), "b")

    def verify(rows: Iterator[Any]) -> Iterator[tuple[int, int]]:
        verifier = Verifier(config)
        for row in rows:
            if verifier.similar(row.sa, row.sb):
                yield row.a, row.b

    verified = spark.createDataFrame(joined.rdd.mapPartitions(verify), _EDGE)
    by_url = spark.createDataFrame(
        docs.map(lambda d: (d.url, d.position)),
        T.StructType([T.StructField("url", T.StringType(), False), T.StructField("position", T.LongType(), False)]),
    )
    first = by_url.groupBy("url").agg(F.min("position").alias("first"))
    repeated = by_url.join(first, "url").where(F.col("position") != F.col("first"))
    same_url = repeated.select(F.col("position").alias("a"), F.col("first").alias("b"))
    return verified.union(same_url)


def _components(
    spark: SparkSession, docs: Any, config: Config, edges: DataFrame, cluster_mode: str, partitions: int
) -> Any:
    """Each component decided: an RDD of :class:`ComponentResult`."""
    components = connected_components(edges).persist(StorageLevel.MEMORY_AND_DISK)
    member_of = components.rdd.map(lambda row: (row.node, row.component))
    keyed = docs.keyBy(lambda d: d.position)
    members = member_of.join(keyed, partitions)  # position -> (component, document)
    declared_filed: Any = None
    notes: Any = None
    if config.canonical:
        declarations = docs.flatMap(
            lambda d: [(d.position, d.url, decl.url)] if (decl := d.declaration(config)) is not None else []
        )
        # Where each URL was first filed, for declarations of pages outside their declarer's component.
        first_filed = docs.map(lambda d: (d.url, d.position)).reduceByKey(min)
        declared_filed = declarations.map(lambda x: (x[2], x[0])).join(first_filed).map(
            lambda kv: (kv[1][0], kv[1][1])
        )  # declarer position -> where its declared page was first filed
        # Declarations of a component's member by pages outside the component.
        component_of_url = members.map(lambda kv: (kv[1][1].url, kv[1][0])).distinct()
        component_of_pos = member_of
        notes = (
            declarations.map(lambda x: (x[2], (x[0], x[1])))
            .join(component_of_url)  # declared url -> ((declarer position, declarer url), component)
            .map(lambda kv: (kv[1][0][0], (kv[1][1], DeclaredBy(kv[1][0][0], kv[1][0][1], kv[0]))))
            .leftOuterJoin(component_of_pos)  # declarer position -> ((component, note), declarer's component)
            .filter(lambda kv: kv[1][1] != kv[1][0][0])
            .map(lambda kv: (kv[1][0][0], ("note", kv[1][0][1])))
        )
    if declared_filed is not None:
        with_filed = members.leftOuterJoin(declared_filed).map(
            lambda kv: (kv[1][0][0], ("member", Member(kv[1][0][1], kv[1][1])))
        )
    else:
        with_filed = members.map(lambda kv: (kv[1][0], ("member", Member(kv[1][1]))))
    events = with_filed if notes is None else with_filed.union(notes)

    def decide(group: Any) -> ComponentResult:
        found = list(group)
        return decide_component(
            config,
            [e for kind, e in found if kind == "member"],
            [e for kind, e in found if kind == "note"],
            cluster_mode,
        )

    return events.groupByKey(partitions).map(lambda kv: decide(kv[1])).persist(StorageLevel.MEMORY_AND_DISK)


def run(
    spark: SparkSession,
    config: Config,
    inputs: list[str],
    read: ReadOptions,
    cluster_mode: str,
    options: SparkOptions,
    write_pair: Callable[[PairRow], None],
    write_cluster: Callable[[ClusterRow], None] | None,
) -> SparkSummary:
    """Deduplicate ``inputs``: pairs and clusters handed to the writers in the local run's order, Parquet
    copies written when asked, and the summary. A file that cannot be read ends the run
    (:class:`InputError`) before anything is written."""
    sc = spark.sparkContext
    partitions = options.partitions or max(2, 2 * sc.defaultParallelism)
    if "spark.sql.shuffle.partitions" not in options.conf:
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    prepared = _read(spark, inputs, read, config, partitions)
    summary = prepared.mapPartitions(_summarise).fold(SparkSummary(), _merge)
    if summary.counts.failures:
        raise InputError(summary.counts.failures[0])
    docs = prepared.filter(lambda d: isinstance(d, PreparedDocument) and d.fingerprinted)
    decided = _components(spark, docs, config, _edges(spark, docs, config), cluster_mode, partitions)
    tallies = decided.map(lambda r: (r.unique, r.duplicate, r.seen)).fold(
        (0, 0, 0), lambda x, y: (x[0] + y[0], x[1] + y[1], x[2] + y[2])
    )
    fingerprinted = summary.documents - sum(summary.skipped.values())
    summary.unique = fingerprinted - tallies[1] - tallies[2]  # a document in no component is unique
    summary.duplicate, summary.seen = tallies[1], tallies[2]
    pairs = decided.flatMap(lambda r: r.pairs).sortBy(lambda p: (p.position, p.order), numPartitions=partitions)
    for pair in pairs.toLocalIterator():
        write_pair(pair)
    cluster_rows = decided.flatMap(lambda r: r.clusters).sortBy(lambda c: (c.position, c.order), numPartitions=partitions)
    if write_cluster is not None:
        for cluster in cluster_rows.toLocalIterator():
            write_cluster(cluster)
    if options.parquet:
        spark.createDataFrame(
            pairs.map(lambda p: (p.near, p.page, p.similarity)), "near string, page string, similarity double"
        ).write.parquet(os.path.join(options.parquet, "pairs"))
        spark.createDataFrame(
            cluster_rows.map(lambda c: (c.members[0], list(c.members), len(c.members))),
            "canonical string, members array<string>, size int",
        ).write.parquet(os.path.join(options.parquet, "clusters"))
    prepared.unpersist()
    decided.unpersist()
    return summary


__all__ = ["ComponentResult", "SparkOptions", "SparkSummary", "run", "session"]
