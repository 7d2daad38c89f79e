"""The Spark engine's executor steps, without Spark (:mod:`scrapy_neardup.offline.spark.tasks`): reading in
splits, candidate pairs, and a component decided as the local run decides it."""

from __future__ import annotations

import json
import random
import stat

import pytest
from demo_site import build_site

from scrapy_neardup.offline.batch import BatchDeduplicator
from scrapy_neardup.offline.cli.common import config_of
from scrapy_neardup.offline.inputs import Document, DocumentReader, ReadCounts
from scrapy_neardup.offline.pairs import FinalGroups, final_pairs, verdict_record
from scrapy_neardup.offline.spark import SparkUnavailable, check_spark, java_version
from scrapy_neardup.offline.spark.tasks import (
    ALL_PAIRS_UP_TO,
    ANCHORS,
    MIN_SPLIT_BYTES,
    Member,
    ReadOptions,
    SourceDocument,
    candidate_pairs,
    decide_component,
    plan_splits,
    prepare_documents,
    read_split,
)


def _write_lines(path, n, seed=3):
    """JSON lines of random lengths (some past a megabyte), blank lines, a bad line and an oversized one."""
    rng = random.Random(seed)
    urls = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            if i % 17 == 5:
                f.write("\n")
            if i % 29 == 7:
                f.write('{"url": "broken\n')
            size = rng.choice((50, 400, 9_000, 300_000))
            url = f"http://s/{i}"
            urls.append(url)
            f.write(json.dumps({"url": url, "text": "w " * size}) + "\n")
    return urls


def test_plain_jsonl_in_byte_ranges_reads_every_line_once_in_input_order(tmp_path):
    path = tmp_path / "in.jsonl"
    _write_lines(path, 120)
    limit = 500_000
    whole = DocumentReader([str(path)], max_size=limit)
    expected = [doc.url for doc in whole]
    splits = plan_splits([str(path)], MIN_SPLIT_BYTES, tasks=64)
    assert len(splits) > 10 and all(s.end is not None for s in splits)
    got, counts = [], ReadCounts()
    for split in splits:
        for item in read_split(split, ReadOptions(max_size=limit)):
            if isinstance(item, ReadCounts):
                counts = counts + item
            else:
                got.append(item)
    assert [d.document.url for d in sorted(got, key=lambda d: d.position)] == expected
    assert len({d.position for d in got}) == len(got)
    assert (counts.unreadable, counts.too_large) == (whole.errors, whole.too_large)
    assert counts.unreadable > 0 and counts.too_large > 0


def test_compressed_and_warc_files_are_one_split_each(tmp_path):
    for name in ("a.jsonl.gz", "b.warc.gz", "c.warc"):
        (tmp_path / name).write_bytes(b"x" * (3 * MIN_SPLIT_BYTES))
    splits = plan_splits([str(tmp_path / n) for n in ("a.jsonl.gz", "b.warc.gz", "c.warc")], MIN_SPLIT_BYTES, 16)
    assert [(s.file_index, s.end) for s in splits] == [(0, None), (1, None), (2, None)]


def test_a_file_that_cannot_be_read_is_a_failure_in_the_counts_not_an_exception(tmp_path):
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    from scrapy_neardup.offline.spark.tasks import Split

    items = list(read_split(Split(0, str(cut)), ReadOptions()))
    assert isinstance(items[-1], ReadCounts) and items[-1].failures and str(cut) in items[-1].failures[0]


def test_a_bucket_gives_all_its_pairs_and_a_large_one_pairs_with_its_anchors():
    small = list(candidate_pairs([5, 3, 9, 3]))
    assert small == [(3, 5), (3, 9), (5, 9)]
    members = list(range(ALL_PAIRS_UP_TO + 52))
    large = list(candidate_pairs(reversed(members)))
    assert len(large) == len(set(large)) == sum(len(members) - 1 - i for i in range(ANCHORS))
    assert all(a < b for a, b in large) and {b for _, b in large} == set(members[1:])


def _demo_documents():
    pages, _ = build_site()
    docs = []
    for path in sorted(pages):
        ctype, body = pages[path]
        if ctype.startswith("text/html; charset"):
            docs.append(Document("http://demo.test" + path, html=body.decode()))
    # The same URL again (seen), and a copy first in the input that declares its original canonical.
    original = next(d for d in docs if d.url.endswith("/news/bridge.html"))
    docs.append(original)
    copy = Document(
        "http://demo.test/copy/bridge",
        html=original.html.replace("<head>", '<head><link rel="canonical" href="/news/bridge.html">'),
    )
    return [copy, *docs]


@pytest.mark.parametrize("mode", ["strict", "components"])
def test_the_documents_decided_as_one_component_give_the_local_runs_pairs(mode, tmp_path):
    """A component is decided as the local run decides: all the demo site's documents as one component give
    the pairs, in order, of BatchDeduplicator over the same input (declared canonical, seen, best copy)."""
    config = config_of({"NEARDUP_ENABLED": True, "NEARDUP_THRESHOLD": 0.5})
    docs = _demo_documents()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"url": d.url, "html": d.html}) + "\n" for d in docs))
    records, groups = [], FinalGroups()

    def kept(verdict):
        groups.note(verdict)
        records.append((len(records), verdict_record(verdict, cluster_mode=mode)))

    BatchDeduplicator(config, workers=1).run(DocumentReader([str(path)]), kept)
    local = [pair for _, pair, _ in final_pairs(lambda: records, groups) if pair is not None]
    expected = [(p.near, p.page, round(p.similarity, 4)) for p in local]
    prepared = [
        p for p in prepare_documents(config, [SourceDocument(i, d) for i, d in enumerate(docs)]) if p.fingerprinted
    ]
    result = decide_component(config, [Member(p) for p in prepared], [], mode)
    got = [(r.near, r.page, round(r.similarity, 4)) for r in sorted(result.pairs, key=lambda r: (r.position, r.order))]
    assert got == expected and len(got) > 10
    assert result.seen == 1 and result.unique + result.duplicate + result.seen == len(prepared)
    assert ("http://demo.test/copy/bridge", "http://demo.test/news/bridge.html") in [(a, b) for a, b, _ in got]


def _fake_java(tmp_path, version_line):
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return home


def test_java_versions_are_read_old_and_new_style(tmp_path):
    old = _fake_java(tmp_path / "a", 'java version "1.8.0_392"')
    new = _fake_java(tmp_path / "b", 'openjdk version "17.0.15" 2025-04-15')
    assert java_version(str(old / "bin" / "java")) == 8
    assert java_version(str(new / "bin" / "java")) == 17
    assert java_version(str(tmp_path / "none")) is None


def test_a_machine_without_the_java_spark_needs_is_told_in_one_line(tmp_path, monkeypatch):
    pytest.importorskip("pyspark")
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, 'openjdk version "11.0.2"')))
    with pytest.raises(SparkUnavailable, match="needs Java 17 or later") as caught:
        check_spark()
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(SparkUnavailable, match="none found"):
        check_spark()


def test_a_machine_without_pyspark_is_told_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(SparkUnavailable, match=r"pip install 'scrapy-neardup\[spark\]'"):
        check_spark()


def test_a_file_spark_read_is_read_as_its_name_says_and_named_in_messages(tmp_path):
    """Bytes of a Hadoop path: gzipped JSON lines under any .gz name, a WARC file cut short refused with
    the path the user gave (not the temporary copy's)."""
    import gzip

    from helpers.dumps import write_warc

    from scrapy_neardup.offline.spark.tasks import read_file_bytes

    lines = "".join(json.dumps({"url": f"http://a/{i}", "text": "w " * 50}) + "\n" for i in range(3))
    items = list(read_file_bytes(4, "hdfs:///dumps/part-0.json.gz", gzip.compress(lines.encode()), ReadOptions()))
    assert [i.document.url for i in items if isinstance(i, SourceDocument)] == [f"http://a/{i}" for i in range(3)]
    assert all(i.position >> 40 == 4 for i in items if isinstance(i, SourceDocument))
    warc = tmp_path / "w.warc.gz"
    write_warc(warc, [(f"http://a/{i}", "<p>" + "w " * 20_000 + "</p>", "text/html", "200 OK") for i in range(3)])
    cut = warc.read_bytes()[:-200]
    (counts,) = [i for i in read_file_bytes(0, "s3a://b/w.warc.gz", cut, ReadOptions()) if isinstance(i, ReadCounts)]
    assert counts.failures and counts.failures[0].startswith("s3a://b/w.warc.gz: truncated")
    (allowed,) = [
        i
        for i in read_file_bytes(0, "s3a://b/w.warc.gz", cut, ReadOptions(allow_truncated=True))
        if isinstance(i, ReadCounts)
    ]
    assert allowed.truncated == ("s3a://b/w.warc.gz",) and not allowed.failures
