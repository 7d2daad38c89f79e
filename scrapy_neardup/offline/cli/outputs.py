"""What ``dedup`` writes, the same from both engines (the local run and ``--engine spark``): the pairs' and
clusters' lines, the outputs opened before any work, the summary line, and the one line of a run that read
nothing."""

from __future__ import annotations

import argparse
import json
from typing import Any, Protocol

from ..inputs import ReadCounts
from ..pairs import Pair
from .common import AtomicOutput, tsv_field


def nothing_read(inputs: list[str], counts: ReadCounts) -> str:
    """The one line of a run that read no document: what the input held instead."""
    held = [
        f"{n} {what}"
        for n, what in (
            (counts.unreadable, "unreadable lines"),
            (counts.too_large, "lines or records over --max-body-size"),
            (counts.not_html, "WARC records that are not HTML responses"),
            (counts.not_ok, "HTML responses whose status is not 2xx"),
        )
        if n
    ]
    return (
        f"no document read from {', '.join(inputs)}"
        + (f" ({', '.join(held)})" if held else " (empty)")
        + "; nothing written (pass --allow-empty to write empty outputs and exit 0)"
    )


def pair_line(pair: Pair) -> str:
    """A pair as a line of the pairs output."""
    return f"{tsv_field(pair.near)}\t{tsv_field(pair.page)}\t{pair.similarity:.4f}\n"


def cluster_line(members: list[str]) -> str:
    """A cluster, canonical first, as a line of the clusters output."""
    return json.dumps({"canonical": members[0], "members": members, "size": len(members)}) + "\n"


def open_outputs(args: argparse.Namespace) -> list[AtomicOutput]:
    """The pairs output and, when asked, the clusters output, opened before any work: a bad path must not be
    found after a persistent store has filed every page (a rerun would then find them all seen, and the
    pairs would be lost)."""
    outputs = [AtomicOutput(args.output)]
    try:
        if args.clusters:
            outputs.append(AtomicOutput(args.clusters))
    except OSError:
        outputs[0].discard()
        raise
    return outputs


class Tally(Protocol):
    """The verdicts of a run, as both engines count them."""

    documents: int
    unique: int
    duplicate: int
    seen: int
    skipped: dict[str, int]


def summary_line(tally: Tally, counts: ReadCounts, seconds: float) -> dict[str, Any]:
    """The summary ``dedup`` writes last on stderr, one JSON object (the documents over the size limit
    counted among the skipped, as ``too_large``)."""
    skipped = dict(tally.skipped)
    if counts.too_large:
        skipped["too_large"] = skipped.get("too_large", 0) + counts.too_large
    summary: dict[str, Any] = {
        "documents": tally.documents,
        "unique": tally.unique,
        "duplicate": tally.duplicate,
        "seen": tally.seen,
        "unchanged": getattr(tally, "unchanged", 0),
        "skipped": skipped,
        "unreadable": counts.unreadable,
        "not_html_records": counts.not_html,
        "not_2xx_responses": counts.not_ok,
        "seconds": round(seconds, 3),
    }
    if counts.truncated:
        summary["truncated"] = list(counts.truncated)
    return summary
