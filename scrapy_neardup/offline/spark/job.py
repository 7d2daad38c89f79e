"""The Spark job of ``dedup --engine spark``: the driver's side. The steps and why they are so: see the
package's docstring; what runs on the executors: :mod:`.tasks`."""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import Py4JError
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...settings import Config
from ..batch import BatchStats
from ..inputs import InputError, ReadCounts, check_inputs
from .components import connected_components
from .tasks import (
    OFFSET_BITS,
    ClusterRow,
    ComponentResult,
    DeclaredBy,
    Member,
    PairRow,
    PreparedDocument,
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

#: What Spark raises when its JVM or a job fails (classified by class: the JVM's and the executors' errors).
SPARK_ERRORS = (Py4JError, PySparkException)

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
class SparkSummary(BatchStats):
    """What the run read and decided: the local run's counts, what reading passed over, and the steps' times."""

    counts: ReadCounts = field(default_factory=ReadCounts)
    #: Seconds of each step on the driver's clock (Spark runs a step when its result is asked for).
    steps: dict[str, float] = field(default_factory=dict)


def session(options: SparkOptions) -> SparkSession:
    """The Spark session: the one ``spark-submit`` started (its master and properties stand), or a new one on
    ``options.master`` (``local[*]`` by default). A local master's executors run this Python; a cluster's
    run what the cluster is given (docs/scaling.md)."""
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    master = options.master or options.conf.get("spark.master") or (None if submitted else "local[*]")
    builder = SparkSession.builder.appName("scrapy-neardup dedup")
    if master and (options.master or not submitted):
        builder = builder.master(master)
    logging = f"-Dlog4j2.configurationFile=file:{os.path.join(os.path.dirname(__file__), 'log4j2.properties')}"
    defaults = {"spark.ui.showConsoleProgress": "false", "spark.driver.extraJavaOptions": logging}
    if master and master.startswith("local"):
        defaults["spark.executor.extraJavaOptions"] = logging  # a cluster's executors have their own files
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
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
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


def _read(spark: SparkSession, inputs: list[str], read: ReadOptions, config: Config, partitions: int) -> Any:
    """The prepared documents and read counts of every input file, an RDD persisted for the steps after. Files
    are numbered in the order the inputs name them (a directory or glob in its files' order), which orders
    their documents as the local run reads them."""
    sc = spark.sparkContext
    check_inputs([p for p in inputs if not is_hadoop_path(p)])
    files: list[tuple[str, bool]] = []  # each input file, and whether Spark reads it
    for path in inputs:
        if is_hadoop_path(path):
            files.extend((name, True) for name in _hadoop_files(spark, [path]))
        else:
            files.append((path, False))
    if len(files) >= 1 << (63 - OFFSET_BITS):
        raise InputError(f"{len(files):,} input files: at most {(1 << (63 - OFFSET_BITS)) - 1:,} in one run")
    local = [i for i, (_, by_spark) in enumerate(files) if not by_spark]
    planned = plan_splits([files[i][0] for i in local], SPLIT_BYTES, partitions)
    splits = [Split(local[s.file_index], s.path, s.start, s.end) for s in planned]
    parts = []
    if splits:
        parts.append(sc.parallelize(splits, len(splits)).flatMap(lambda s: read_split(s, read)))
    order = {name: i for i, (name, by_spark) in enumerate(files) if by_spark}
    if order:

        def read_bytes(named: tuple[str, bytes]) -> Iterator[Any]:
            if named[0] not in order:
                raise RuntimeError(f"Spark read {named[0]}, which is not among the files listed: {sorted(order)}")
            return read_file_bytes(order[named[0]], named[0], named[1], read)

        parts.append(sc.binaryFiles(",".join(order), minPartitions=len(order)).flatMap(read_bytes))
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
    return SparkSummary(documents=a.documents + b.documents, skipped=skipped, counts=a.counts + b.counts)


def _frame(spark: SparkSession, rows: Any, schema: T.StructType) -> DataFrame:
    """A DataFrame of an RDD of tuples made here to fit ``schema`` (not checked row by row again)."""
    return spark.createDataFrame(rows, schema, verifySchema=False)


_EDGE = T.StructType([T.StructField("a", T.LongType(), False), T.StructField("b", T.LongType(), False)])


def _edges(spark: SparkSession, docs: Any, documents: DataFrame, config: Config) -> DataFrame:
    """Pairs of documents whose decisions may depend on each other: verified candidate pairs of a shared LSH
    bucket, and documents of one URL (a page met twice is *seen*, or re-checked, against its record)."""
    buckets = _frame(
        spark,
        docs.flatMap(lambda d: [(key, d.position) for key in d.bucket_keys()]),
        T.StructType([T.StructField("bucket", T.LongType(), False), T.StructField("position", T.LongType(), False)]),
    )
    shared = buckets.groupBy("bucket").agg(F.collect_list("position").alias("members")).where(F.size("members") > 1)
    candidates = _frame(spark, shared.rdd.flatMap(lambda row: candidate_pairs(row.members)), _EDGE).distinct()
    signatures = _frame(
        spark,
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

    def verify(rows: Iterable[Any]) -> Iterator[tuple[int, int]]:
        verifier = Verifier(config)
        for row in rows:
            if verifier.similar(row.sa, row.sb):
                yield row.a, row.b

    verified = _frame(spark, joined.rdd.mapPartitions(verify), _EDGE)
    by_url = documents.select("url", "position")
    first = by_url.groupBy("url").agg(F.min("position").alias("first"))
    repeated = by_url.join(first, "url").where(F.col("position") != F.col("first"))
    same_url = repeated.select(F.col("position").alias("a"), F.col("first").alias("b"))
    return verified.union(same_url)


_DOCUMENTS = T.StructType(
    [
        T.StructField("position", T.LongType(), False),
        T.StructField("url", T.StringType(), False),
        T.StructField("declared", T.StringType(), True),
        T.StructField("payload", T.BinaryType(), False),
    ]
)


def _documents(spark: SparkSession, docs: Any, config: Config) -> DataFrame:
    """The fingerprinted documents as a DataFrame, so that the joins before the decision run in the JVM:
    position, URL, the URL it declares canonical, and the document itself (pickled by this job for its own
    later step, as PySpark pickles every Python value it moves)."""

    def row(d: PreparedDocument) -> tuple[int, str, str | None, bytes]:
        declaration = d.declaration(config)
        return d.position, d.url, None if declaration is None else declaration.url, pickle.dumps(d, protocol=5)

    return _frame(spark, docs.map(row), _DOCUMENTS)


def _components(documents: DataFrame, config: Config, edges: DataFrame, cluster_mode: str, partitions: int) -> Any:
    """Each component decided: an RDD of :class:`ComponentResult`. A member carries where the page it declares
    was first filed; a component, the declarations of its members by pages outside it."""
    components = connected_components(edges)
    members = components.join(documents, components.node == documents.position).drop("node")
    declared_filed = F.lit(None).cast("long")
    if config.canonical:
        first_filed = documents.groupBy("url").agg(F.min("position").alias("filed_at"))
        members = members.join(first_filed.withColumnRenamed("url", "declared"), "declared", "left")
        declared_filed = F.col("filed_at")
    events: Any = members.select("component", "payload", declared_filed.alias("filed_at")).rdd.map(
        lambda row: (row.component, Member(pickle.loads(row.payload), row.filed_at))
    )
    if config.canonical:
        declarers = documents.where(F.col("declared").isNotNull()).select(
            F.col("position").alias("by_position"), F.col("url").alias("by_url"), "declared"
        )
        declared_members = members.select(F.col("url").alias("declared"), "component").distinct()
        notes = (
            declarers.join(declared_members, "declared")
            .join(
                components.withColumnRenamed("component", "by_component"), F.col("by_position") == F.col("node"), "left"
            )
            .where(F.col("by_component").isNull() | (F.col("by_component") != F.col("component")))
            .rdd.map(lambda row: (row.component, DeclaredBy(row.by_position, row.by_url, row.declared)))
        )
        events = events.union(notes)

    def decide(group: Any) -> ComponentResult:
        found = list(group)
        return decide_component(
            config,
            [e for e in found if isinstance(e, Member)],
            [e for e in found if isinstance(e, DeclaredBy)],
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
    clock = time.perf_counter()
    steps: dict[str, float] = {}

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps[name] = round(now - clock, 3)
        clock = now

    prepared = _read(spark, inputs, read, config, partitions)
    summary = prepared.mapPartitions(_summarise).fold(SparkSummary(), _merge)
    step("read_and_prepare")
    if summary.counts.failures:
        raise InputError(summary.counts.failures[0])
    docs = prepared.filter(lambda d: isinstance(d, PreparedDocument) and d.fingerprinted)
    documents = _documents(spark, docs, config).persist(StorageLevel.MEMORY_AND_DISK)
    edges = _edges(spark, docs, documents, config).localCheckpoint()
    step("candidates_verified")
    decided = _components(documents, config, edges, cluster_mode, partitions)
    step("components")
    tallies = decided.map(lambda r: (r.unique, r.duplicate, r.seen)).fold(
        (0, 0, 0), lambda x, y: (x[0] + y[0], x[1] + y[1], x[2] + y[2])
    )
    step("decided")
    fingerprinted = summary.documents - sum(summary.skipped.values())
    summary.unique = fingerprinted - tallies[1] - tallies[2]  # a document in no component is unique
    summary.duplicate, summary.seen = tallies[1], tallies[2]
    pairs = decided.flatMap(lambda r: r.pairs).sortBy(lambda p: (p.position, p.order), numPartitions=partitions)
    for pair in pairs.toLocalIterator():
        write_pair(pair)
    if write_cluster is not None:
        cluster_rows = decided.flatMap(lambda r: r.clusters)
        for cluster in cluster_rows.sortBy(lambda c: (c.position, c.order), numPartitions=partitions).toLocalIterator():
            write_cluster(cluster)
    if options.parquet:  # a table has no order: written from the decided components, not sorted again
        spark.createDataFrame(
            decided.flatMap(lambda r: [(p.near, p.page, p.similarity) for p in r.pairs]),
            "near string, page string, similarity double",
        ).write.parquet(os.path.join(options.parquet, "pairs"))
        spark.createDataFrame(
            decided.flatMap(lambda r: [(c.members[0], list(c.members), len(c.members)) for c in r.clusters]),
            "canonical string, members array<string>, size int",
        ).write.parquet(os.path.join(options.parquet, "clusters"))
    step("written")
    prepared.unpersist()
    documents.unpersist()
    decided.unpersist()
    summary.steps = steps
    return summary


__all__ = ["SPARK_ERRORS", "ComponentResult", "SparkOptions", "SparkSummary", "run", "session"]
