"""``scrapy-neardup dedup``: near-duplicate pairs and clusters of crawl dumps."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from ...assembly import build_algorithm
from ..pairs import FinalGroups, Pair, final_pairs, verdict_record
from .common import StopRequest, config_of
from .outputs import cluster_line, nothing_read, open_outputs, pair_line, summary_line
from .parser import settings_from_args

if TYPE_CHECKING:
    from ...engine.detector import Verdict


class PairSpool:
    """The verdicts of a run, kept on disk until it ends (one line each; in memory, only the re-pointed
    groups), so that its pairs and clusters are written as its groups end (:func:`final_pairs`)."""

    def __init__(self, cluster_mode: str, only_new: bool) -> None:
        self.file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.groups = FinalGroups()
        self.cluster_mode = cluster_mode
        self.only_new = only_new

    def add(self, verdict: Verdict) -> None:
        self.groups.note(verdict)
        self.file.write(json.dumps(verdict_record(verdict, self.only_new, self.cluster_mode)) + "\n")

    def _records(self) -> Iterator[tuple[int, list[Any]]]:
        self.file.seek(0)
        for number, line in enumerate(self.file):
            yield number, json.loads(line)

    def write(self, out: IO[str] | None, edges: list[tuple[str, str]] | None) -> None:
        """Write the pairs to ``out`` and the clusters' edges to ``edges`` (each when given)."""
        for _, pair, made in final_pairs(self._records, self.groups):
            if out is not None and pair is not None:
                out.write(pair_line(pair))
            if edges is not None:
                edges.extend(made)

    def close(self) -> None:
        self.file.close()


def cmd_dedup(args: argparse.Namespace) -> int:
    from ...engine.cluster import clusters
    from ..batch import BatchDeduplicator, BatchStats, Progress
    from ..inputs import DocumentReader, InputError, check_inputs

    if args.engine == "spark":
        from .spark import cmd_dedup_spark

        return cmd_dedup_spark(args)
    for option, given in (
        ("--spark-master", args.spark_master),
        ("--spark-conf", args.spark_conf),
        ("--partitions", args.partitions),
        ("--parquet", args.parquet),
    ):
        if given:
            raise SystemExit(f"scrapy-neardup: {option} is an option of --engine spark")
    config = config_of(settings_from_args(args))
    check_inputs(args.inputs)
    warning = build_algorithm(config).scale_warning()
    if warning:
        print(f"scrapy-neardup: {warning}", file=sys.stderr)
    reader = DocumentReader(
        args.inputs,
        raw_lines=True,
        max_size=config.max_body_size,
        warc_reader=args.warc_reader,
        allow_truncated=args.allow_truncated,
    )
    outputs = open_outputs(args)
    out = outputs[0].file
    spool = PairSpool(args.cluster_mode, args.only_new)

    all_pairs = None
    if args.all_pairs:
        from ..allpairs import AllPairs

        all_pairs = AllPairs(build_algorithm(config))

    def on_fingerprint(key, fp):
        assert all_pairs is not None
        for other, similarity in all_pairs.add(key, fp.signature, fp.buckets):
            out.write(pair_line(Pair(key, other, similarity)))

    stop = StopRequest()
    stats = BatchStats()
    try:
        runner = BatchDeduplicator(config, args.spider, workers=args.workers, reset=args.reset)
        with stop:
            runner.run(
                reader,
                spool.add,
                Progress(args.progress, lambda: reader.fraction),
                stats=stats,
                should_stop=stop.requested,
                on_fingerprint=on_fingerprint if all_pairs is not None else None,
            )
        if stats.documents == 0 and not args.allow_empty and not stop.requested():
            # An output with no pairs would read "no near-duplicates" in a pipeline: it is not written.
            raise InputError(nothing_read(args.inputs, reader.counts()))
        edges: list[tuple[str, str]] | None = [] if args.clusters else None
        spool.write(out if all_pairs is None else None, edges)
        if edges is not None:
            for members in clusters(edges, args.cluster_mode):
                outputs[1].file.write(cluster_line(members))
        for output in outputs:
            output.commit()
    finally:
        spool.close()
        for output in outputs:
            output.discard()
    summary = summary_line(stats, reader.counts(), stats.seconds)
    if stop.requested():
        summary["interrupted"] = True
        print(
            f"scrapy-neardup: interrupted after {stats.documents} documents: "
            f"{' and '.join(o.path for o in outputs)} hold the pairs and clusters of those, as the store does; "
            "the rest of the input was not read",
            file=sys.stderr,
        )
    print(json.dumps(summary), file=sys.stderr)
    return 130 if stop.requested() else 0
