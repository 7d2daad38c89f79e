"""What the Spark executors run: reading a split of the input, preparing documents with the crawl's own
pipeline, the LSH bucket keys of a document, candidate pairs of a bucket and their verification, and the
decision of one connected component by the engine's decision loop. Plain Python over plain values (no
import of Spark): each step is testable alone, and crosses to Spark as picklable dataclasses.

A document's *position* orders it as the input does (file, then record or byte offset): the local CLI
decides in that order, and so does :func:`decide_component` within a component.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Union
from urllib.parse import urlsplit

from ...engine.canonical import Declaration, chosen, may_fetch
from ...engine.cluster import clusters
from ...engine.decisions import Decision, DecisionLoop, Declared
from ...engine.detector import Detector
from ...engine.prepare import Prepared
from ...settings import Config
from ..inputs import BadLine, Document, DocumentReader, InputError, RawLine, ReadCounts, parse_line
from ..pairs import FinalGroups, final_pairs, verdict_record

logger = logging.getLogger(__name__)

#: Bits of a position left to the record number or byte offset within one file (a terabyte); the file's
#: index in the input takes the bits above.
OFFSET_BITS = 40


def position(file_index: int, offset: int) -> int:
    """The order of a record: its file's index in the input, then its number or byte offset in the file."""
    return (file_index << OFFSET_BITS) | offset


def is_hadoop_path(path: str) -> bool:
    """A path Spark reads (``hdfs://``, ``s3a://``, ``file://``...): any with a URI scheme. A plain path is
    read by the executors themselves, so it must be where every executor sees it (one machine, or a shared
    file system)."""
    scheme = urlsplit(path).scheme
    return len(scheme) > 1 and "://" in path


def is_plain_jsonl(path: str) -> bool:
    lowered = path.lower()
    return not lowered.endswith((".gz", ".warc", ".arc"))


@dataclass(frozen=True)
class Split:
    """A part of the input one task reads: a whole file, or the lines of a plain JSONL file that begin in
    the byte range ``[start, end)``."""

    file_index: int
    path: str
    start: int = 0
    end: int | None = None


#: The smallest range a plain JSONL file is split into: below it, a task costs more than it reads.
MIN_SPLIT_BYTES = 1 << 20


def plan_splits(paths: list[str], max_split_bytes: int, tasks: int) -> list[Split]:
    """The splits of plain (local) input files: plain JSONL in ranges (its lines are independent, as
    Hadoop's text input splits them) of at most ``max_split_bytes``, and small enough that the input makes
    ``tasks`` of them, so that its documents need not be shuffled to spread; a compressed or WARC file whole
    (a gzip stream is read from its beginning)."""
    plain = sum(os.path.getsize(p) for p in paths if is_plain_jsonl(p))
    split_bytes = max(MIN_SPLIT_BYTES, min(max_split_bytes, -(-plain // max(1, tasks))))
    splits = []
    for index, path in enumerate(paths):
        size = os.path.getsize(path)
        if is_plain_jsonl(path) and size > split_bytes:
            for start in range(0, size, split_bytes):
                splits.append(Split(index, path, start, min(size, start + split_bytes)))
        else:
            splits.append(Split(index, path))
    return splits


@dataclass(frozen=True)
class ReadOptions:
    """How input files are read: as ``dedup``'s options say."""

    max_size: int | None = None
    warc_reader: str = "auto"
    allow_truncated: bool = False


@dataclass(frozen=True)
class SourceDocument:
    """A document read, at its position in the input."""

    position: int
    document: Document


#: What reading yields: documents, and one :class:`ReadCounts` a split, at its end.
ReadItem = Union[SourceDocument, ReadCounts]


def read_split(split: Split, options: ReadOptions) -> Iterator[ReadItem]:
    """The documents of one split, then what was passed over. A file that cannot be read to its end is a
    failure in the counts (the driver ends the run with its message, as the local CLI does), not an error
    that Spark would retry."""
    if split.end is not None:
        yield from _read_range(split, options)
        return
    reader = DocumentReader(
        [split.path],
        raw_lines=False,
        max_size=options.max_size,
        warc_reader=options.warc_reader,
        allow_truncated=options.allow_truncated,
    )
    try:
        for number, item in enumerate(reader):
            assert isinstance(item, Document)
            yield SourceDocument(position(split.file_index, number), item)
    except InputError as exc:
        yield reader.counts((str(exc),))
        return
    yield reader.counts()


def _read_range(split: Split, options: ReadOptions) -> Iterator[ReadItem]:
    """The lines of a plain JSONL file that begin in the split's byte range (a line that begins before it
    belongs to the split before), each at its byte offset; bad lines are named by that offset."""
    assert split.end is not None
    tally = _Tally()
    try:
        yield from _lines_in_range(split, options.max_size, tally)
    except OSError as exc:
        failure = f"{split.path}: cannot be read: {exc.strerror or exc}"
        yield ReadCounts(tally.unreadable, tally.too_large, failures=(failure,))
        return
    yield ReadCounts(unreadable=tally.unreadable, too_large=tally.too_large)


@dataclass
class _Tally:
    unreadable: int = 0
    too_large: int = 0


def _lines_in_range(split: Split, limit: int | None, tally: _Tally) -> Iterator[SourceDocument]:
    """The documents of a range, counting the unreadable and the oversized lines in ``tally``."""
    assert split.end is not None
    with open(split.path, "rb") as f:
        if split.start > 0:
            f.seek(split.start - 1)
            f.readline()  # the end of the line the previous split reads
        while True:
            offset = f.tell()
            if offset >= split.end:
                break
            line = f.readline() if limit is None else f.readline(limit + 1)
            if not line:
                break
            if limit is not None and len(line) > limit:
                while line and not line.endswith(b"\n"):
                    line = f.readline(1 << 20)
                tally.too_large += 1
                logger.warning("%s: line at byte %d passed over: larger than %d bytes", split.path, offset, limit)
                continue
            if not line.strip():
                continue
            try:
                doc = parse_line(RawLine(split.path, 0, line))
            except BadLine as exc:
                tally.unreadable += 1
                why = str(exc).split(": line passed over: ", 1)[-1]
                logger.warning("%s: line at byte %d passed over: %s", split.path, offset, why)
                continue
            yield SourceDocument(position(split.file_index, offset), doc)


def read_file_bytes(file_index: int, path: str, data: bytes, options: ReadOptions) -> Iterator[ReadItem]:
    """The documents of a file Spark read (a Hadoop path: its bytes), read as a local file would be, from a
    temporary copy; messages name the file, not the copy."""
    lowered = path.lower()
    suffix = next((s for s in (".warc.gz", ".arc.gz", ".warc", ".arc") if lowered.endswith(s)), "")
    suffix = suffix or (".jsonl.gz" if lowered.endswith(".gz") else ".jsonl")  # read as the local run reads it
    with tempfile.NamedTemporaryFile(suffix=suffix) as copy:
        copy.write(data)
        copy.flush()
        for item in read_split(Split(file_index, copy.name), options):
            if isinstance(item, ReadCounts):
                item = replace(
                    item,
                    truncated=tuple(path for _ in item.truncated),
                    failures=tuple(message.replace(copy.name, path) for message in item.failures),
                )
            yield item


@dataclass(frozen=True)
class PreparedDocument:
    """A document made ready for the decision, at its position: its URL, what its HTTP header or record
    declares canonical, and :meth:`Prepared.to_wire` (its HTML's own declaration is in there)."""

    position: int
    url: str
    declared: Declaration | None
    wire: tuple

    @property
    def prepared(self) -> Prepared:
        return Prepared.from_wire(self.wire)

    @property
    def fingerprinted(self) -> bool:
        return self.wire[3] is not None

    @property
    def skip_reason(self) -> str:
        return str(self.wire[0])

    def signatures(self) -> tuple[bytes, ...]:
        """The signatures of the texts it may be filed on: its fingerprint's, and its page text's."""
        return tuple(fp[0] for fp in (self.wire[3], self.wire[4]) if fp is not None)

    def bucket_keys(self) -> set[int]:
        """The LSH bucket keys of both its fingerprints (the template guard may file it on either)."""
        keys: set[int] = set()
        prepared = self.prepared
        for fp in (prepared.fingerprint, prepared.page_fingerprint):
            if fp is not None:
                keys.update(fp.buckets.tolist())
        return keys

    def declaration(self, config: Config) -> Declaration | None:
        """The URL it declares canonical, when declarations are honoured and it declares another."""
        if not config.canonical:
            return None
        found = chosen(self.declared, self.prepared.declared_canonical)
        return found if found is not None and found.url != self.url else None


_pipeline_config: Config | None = None


def prepare_documents(config: Config, items: Iterable[ReadItem]) -> Iterator[PreparedDocument | ReadCounts]:
    """Documents to what the decision needs, with the pipeline of the local CLI's workers (built once in each
    executor's Python worker); counts pass through."""
    from ...workers import init_worker, worker_pipeline
    from ..batch import prepare

    global _pipeline_config
    if _pipeline_config != config:
        init_worker(config, in_worker=False, learn_locally=False)
        _pipeline_config = config
    pipeline = worker_pipeline()
    for item in items:
        if isinstance(item, ReadCounts):
            yield item
            continue
        doc = item.document
        yield PreparedDocument(item.position, doc.url, doc.declared, prepare(pipeline, doc).to_wire())


#: A bucket of up to this many documents gives every pair of them as candidates; a larger one (a text shared
#: by a whole site, most of its members copies of each other) pairs each member with its first
#: :data:`ANCHORS` only, so that a bucket costs linear, not quadratic, work. A member like none of the anchors
#: but like another member misses that pair here (it still meets it through any other bucket the two share):
#: the one place where the components may be narrower than the local run's lookups; the outputs' agreement
#: is measured in docs/benchmarks.md.
ALL_PAIRS_UP_TO = 48
ANCHORS = 8


def candidate_pairs(positions: Iterable[int]) -> Iterator[tuple[int, int]]:
    """The candidate pairs ``(a, b)``, ``a < b``, of the documents sharing one bucket."""
    members = sorted(set(positions))
    anchors = len(members) if len(members) <= ALL_PAIRS_UP_TO else ANCHORS
    for i, a in enumerate(members[:anchors]):
        for b in members[i + 1 :]:
            yield a, b


class Verifier:
    """Whether two documents are near-duplicates by their signatures, at the threshold of the decision: by
    any of the texts each may be filed on (a superset of the pairs a decision can meet)."""

    def __init__(self, config: Config) -> None:
        from ...assembly import build_algorithm

        self.algorithm = build_algorithm(config)

    def similar(self, a: Iterable[bytes], b: Iterable[bytes]) -> bool:
        threshold = self.algorithm.threshold
        others = list(b)
        return any(self.algorithm.similarity(x, y) >= threshold for x in a for y in others)


@dataclass(frozen=True)
class Member:
    """A document of a component; ``declared_filed_at``: where the page it declares canonical, outside the
    component, was first filed (so that the decision finds it filed, as the local run's store would)."""

    document: PreparedDocument
    declared_filed_at: int | None = None


@dataclass(frozen=True)
class DeclaredBy:
    """A page outside a component that declared one of its members canonical, at its position."""

    position: int
    key: str
    declared: str


@dataclass(frozen=True)
class PairRow:
    """One line of the pairs output; ``position`` and ``order`` sort the lines as the local run writes them
    (by the input document whose decision made them, then in the order made)."""

    position: int
    order: int
    near: str
    page: str
    similarity: float


@dataclass(frozen=True)
class ClusterRow:
    """One cluster, canonical first, sorted as the local run writes them (by its first edge)."""

    position: int
    order: int
    members: tuple[str, ...]


@dataclass
class ComponentResult:
    pairs: list[PairRow] = field(default_factory=list)
    clusters: list[ClusterRow] = field(default_factory=list)
    unique: int = 0
    duplicate: int = 0
    seen: int = 0


class _ComponentDetector(Detector):
    """The detector of one component's decision. Its store holds the component only; a page the component
    declares canonical that was filed elsewhere before the page at hand is reported filed (``group_of``),
    as the local run's store reports it: such a declaration keeps its declarer's group from moving to a
    better copy (:meth:`Detector._displaces`)."""

    filed_elsewhere: dict[str, int]
    now: int = 0

    def group_of(self, key: str) -> str | None:
        found = super().group_of(key)
        if found is None and self.filed_elsewhere.get(key, self.now) < self.now:
            return key
        return found


def decide_component(
    config: Config, members: Iterable[Member], declared_by: Iterable[DeclaredBy], cluster_mode: str
) -> ComponentResult:
    """Decide a component's documents in input order with the engine's decision loop (memory store, template
    guard, best copy, declared canonicals), as the local run decides them; the pairs, clusters and counts of
    its verdicts."""
    from ...assembly import build_algorithm, build_template_guard, new_detector
    from ...store.memory import MemoryStore

    docs = sorted(members, key=lambda m: m.document.position)
    notes = sorted(declared_by, key=lambda d: d.position)
    detector = new_detector(config, build_algorithm(config), MemoryStore(), kind=_ComponentDetector)
    assert isinstance(detector, _ComponentDetector)
    detector.filed_elsewhere = {}
    for m in docs:
        declaration = m.document.declaration(config)
        if declaration is not None and m.declared_filed_at is not None:
            detector.filed_elsewhere[declaration.url] = m.declared_filed_at
    detector.open()
    loop = DecisionLoop(detector, build_template_guard(config, detector.algorithm), batch=1)
    first: dict[str, PreparedDocument] = {}
    for m in docs:
        first.setdefault(m.document.url, m.document)
    result = ComponentResult()
    groups = FinalGroups()
    # Each verdict's record at its place, (position, order): written as the local run writes them, with the
    # component's final groups (:func:`~scrapy_neardup.offline.pairs.final_pairs`).
    records: list[tuple[tuple[int, int], list[Any]]] = []

    def report(decisions: list[Decision], at: int) -> None:
        for decision in decisions:
            if decision.again:
                continue
            verdict = decision.verdict
            setattr(result, verdict.status, getattr(result, verdict.status) + 1)
            groups.note(verdict)
            records.append(((at, len(records)), verdict_record(verdict, cluster_mode=cluster_mode)))

    waiting = iter(notes)
    note = next(waiting, None)
    try:
        for m in docs:
            doc = m.document
            while note is not None and note.position < doc.position:
                loop.declarations.note(note.key, note.declared)
                note = next(waiting, None)
            detector.now = doc.position
            prepared = doc.prepared
            declared = None
            declaration = doc.declaration(config)
            if declaration is not None:
                ahead = first.get(declaration.url)
                had = (
                    ahead is not None
                    and ahead.position > doc.position
                    and may_fetch(config.canonical_fetch, doc.url, declaration.url)
                )
                declared = Declared(declaration.url, ahead.prepared if had and ahead is not None else None)
            report(loop.decide(doc.url, doc.url, prepared, declared), doc.position)
        report(loop.flush(), docs[-1].document.position if docs else 0)
    finally:
        detector.close()
    edges: list[tuple[str, str]] = []
    edge_at: list[tuple[int, int]] = []
    for (at, order), pair, made in final_pairs(lambda: records, groups):
        if pair is not None:
            result.pairs.append(PairRow(at, order, pair.near, pair.page, pair.similarity))
        edges += made
        edge_at += [(at, order)] * len(made)
    if edges:
        where: dict[str, tuple[int, int]] = {}
        for (dup, _), slot in zip(edges, edge_at):
            where.setdefault(dup, slot)
        for members_of in clusters(edges, cluster_mode):
            earliest = min(where.get(key, (1 << 62, 0)) for key in members_of)
            result.clusters.append(ClusterRow(earliest[0], earliest[1], tuple(members_of)))
    return result
