"""``scrapy-neardup dedup --engine spark``: real Spark jobs (``local[2]``, and ``local-cluster`` with executor
processes of their own, through ``spark-submit``), each compared with the local run over the same input."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from demo_site import build_site
from helpers.dumps import write_warc

pyspark = pytest.importorskip("pyspark")

from scrapy_neardup.offline.spark import SparkUnavailable, check_spark  # noqa: E402

try:
    check_spark()
except SparkUnavailable as exc:  # pragma: no cover - CI has Java 17
    pytest.skip(str(exc), allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SITE = "http://demo.test"
QUIET = ["--spark-conf", "spark.ui.enabled=false"]


def run_cli(*args, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def summary_of(proc):
    """The command's summary line: its last on stderr, but for what Spark's JVM logs after it under
    spark-submit (whose logging is the cluster's)."""
    return json.loads([line for line in proc.stderr.splitlines() if line.startswith('{"documents"')][-1])


def ours(proc):
    """The lines the command itself wrote on stderr (Spark's JVM writes a few of its own)."""
    return [line for line in proc.stderr.splitlines() if line.startswith("scrapy-neardup:")]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """The demo site split over a JSONL file and a WARC file: the JSONL file with a bad line, a page met
    twice, and a copy, first in the input, that declares its original canonical; the WARC file with a PNG
    and three "not found" pages of one text."""
    folder = tmp_path_factory.mktemp("dumps")
    pages, _ = build_site()
    html = sorted((p, body.decode()) for p, (ctype, body) in pages.items() if ctype.startswith("text/html; charset"))
    original = dict(html)["/news/bridge.html"]
    copy = original.replace("<head>", '<head><link rel="canonical" href="/news/bridge.html">')
    rng = random.Random(4)
    lines = [json.dumps({"url": SITE + "/copy/bridge", "html": copy})]
    for path, body in html[::2]:
        # A comment that does not compress: the file is read in several byte ranges.
        lines.append(json.dumps({"url": SITE + path, "html": body + f"<!-- {rng.randbytes(60_000).hex()} -->"}))
    lines.insert(5, '{"url": "broken')
    lines.append(json.dumps({"url": SITE + "/news/bridge.html", "html": original}))
    jsonl = folder / "crawl.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    missing = "<html><body><article><p>" + " ".join(f"gone{i}" for i in range(300)) + "</p></article></body></html>"
    responses = [(SITE + p, body, "text/html; charset=utf-8", "200 OK") for p, body in html[1::2]]
    responses.append((SITE + "/x.png", b"\x89PNG", "image/png", "200 OK"))
    responses += [(f"{SITE}/missing/{i}", missing, "text/html", "404 Not Found") for i in range(3)]
    warc = folder / "crawl.warc.gz"
    write_warc(warc, responses)
    return jsonl, warc


def _compare(tmp_path, inputs, spark_inputs, *options, allow_truncated=False):
    local = tmp_path / "local"
    spark = tmp_path / "spark"
    local.mkdir()
    spark.mkdir()
    done = {}
    for where, engine, paths in ((local, [], inputs), (spark, ["--engine", "spark", *options, *QUIET], spark_inputs)):
        proc = run_cli(
            "dedup",
            *map(str, paths),
            "-o",
            str(where / "pairs.tsv"),
            "--clusters",
            str(where / "clusters.jsonl"),
            "--threshold",
            "0.5",
            *(["--allow-truncated"] if allow_truncated else []),
            *engine,
        )
        done[where.name] = summary_of(proc)
    for name in ("pairs.tsv", "clusters.jsonl"):
        assert (spark / name).read_text() == (local / name).read_text(), name
    return done["local"], done["spark"]


def _same_counts(local, spark):
    keys = (
        "documents",
        "unique",
        "duplicate",
        "seen",
        "skipped",
        "unreadable",
        "not_html_records",
        "not_2xx_responses",
    )
    assert {k: spark[k] for k in keys} == {k: local[k] for k in keys}


def test_local2_writes_the_local_runs_pairs_clusters_and_counts(dumps, tmp_path):
    """JSONL read in byte ranges and a WARC read by Spark (a file:// glob, as hdfs:// and s3a:// paths are
    read), and a truncated WARC used to the cut (``--allow-truncated``): the pairs, clusters and counts of
    the local run, byte for byte (declared canonical, a page met twice, a bad line, non-HTML and non-2xx
    records, the records before the cut); Parquet copies beside them."""
    jsonl, warc = dumps
    assert jsonl.stat().st_size > 2 << 20
    cut = _truncated_warc(tmp_path)
    parquet = tmp_path / "parquet"
    glob = f"file://{warc.parent}/crawl.warc*"
    local, spark = _compare(
        tmp_path,
        [jsonl, warc, cut],
        [jsonl, glob, cut],
        "--spark-master",
        "local[2]",
        "--parquet",
        str(parquet),
        allow_truncated=True,
    )
    _same_counts(local, spark)
    assert spark["seen"] == 1 and spark["unreadable"] == 1 and spark["not_2xx_responses"] == 3
    assert spark["not_html_records"] == 1 and spark["duplicate"] > 15
    assert spark["truncated"] == local["truncated"] == [str(cut)]
    pairs = (tmp_path / "spark" / "pairs.tsv").read_text()
    assert f"{SITE}/copy/bridge\t{SITE}/news/bridge.html\t" in pairs
    assert "http://a/1\thttp://a/0\t" in pairs and "http://a/3\thttp://a/2\t" in pairs  # before the cut
    for table in ("pairs", "clusters"):
        parts = [p for p in os.listdir(parquet / table) if p.endswith(".parquet")]
        assert parts and (parquet / table / "_SUCCESS").exists()
        assert all((parquet / table / p).read_bytes()[:4] == b"PAR1" for p in parts)
    again = run_cli(
        "dedup", str(jsonl), "-o", str(tmp_path / "x.tsv"), "--engine", "spark", "--parquet", str(parquet), check=False
    )
    assert again.returncode == 1 and ours(again) == [
        f"scrapy-neardup: {parquet}: already exists; --parquet writes a new directory"
    ]


def _story(seed):
    rng = random.Random(seed)
    return (
        f"<html><body><article><p>{' '.join(f'w{rng.randrange(9000)}' for _ in range(400))}</p></article></body></html>"
    )


def _truncated_warc(folder):
    """A WARC file of six records, its last cut short: pages 0-1 and 2-3 are copies before the cut."""
    rng = random.Random(9)
    path = folder / "whole.warc.gz"
    write_warc(
        path,
        [
            (f"http://a/{i}", _story(seed) + f"<!-- {rng.randbytes(60_000).hex()} -->", "text/html", "200 OK")
            for i, seed in enumerate((1, 1, 2, 2, 3, 4))
        ],
    )
    cut = folder / "cut.warc.gz"
    cut.write_bytes(path.read_bytes()[:-300])
    path.unlink()
    return cut


def test_a_truncated_warc_is_refused_as_the_local_run_refuses_it(tmp_path):
    """Without ``--allow-truncated``: one line naming the file and how far it reads, the output left as it was
    (the file used to the cut: test_local2_writes_the_local_runs_pairs_clusters_and_counts)."""
    cut = _truncated_warc(tmp_path)
    out = tmp_path / "pairs.tsv"
    out.write_text("kept\n")
    refused = run_cli(
        "dedup", str(cut), "-o", str(out), "--engine", "spark", "--spark-master", "local[2]", *QUIET, check=False
    )
    assert refused.returncode == 1 and out.read_text() == "kept\n"
    (line,) = ours(refused)
    assert "after 5 complete records" in line and "--allow-truncated" in line and str(cut) in line
    local = run_cli("dedup", str(cut), "-o", str(out), check=False)
    assert local.returncode == 1 and ours(local) == [line]


def test_options_spark_cannot_serve_are_refused_in_one_line_before_spark_starts(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"url": "http://a/1", "text": "a b c " * 100}) + "\n")
    for options, said in (
        (["--engine", "spark", "--store", f"sqlite:///{tmp_path}/s.db"], "--store cannot be used with --engine spark"),
        (["--engine", "spark", "--all-pairs"], "--all-pairs cannot be used with --engine spark"),
        (["--parquet", str(tmp_path / "p")], "--parquet is an option of --engine spark"),
    ):
        proc = run_cli("dedup", str(src), "-o", str(tmp_path / "o.tsv"), *options, check=False)
        (line,) = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and line.startswith(f"scrapy-neardup: {said}")
        assert not (tmp_path / "o.tsv").exists()


def test_connected_components_of_chains_and_random_graphs_are_those_of_union_find():
    """Large-star / small-star in the DataFrame API against union-find: a long path (the most rounds), a
    star, and a random sparse graph, with node numbers past 2^40 as positions are."""
    from helpers import spark_components

    from scrapy_neardup.engine.cluster import UnionFind

    rng = random.Random(5)
    big = 1 << 41
    edges = [(big + i, big + i + 1) for i in range(0, 300)][::-1]  # a path, given from its far end
    edges += [(7, n) for n in range(8, 60)]  # a star
    nodes = [rng.randrange(10**6, 10**7) for _ in range(400)]
    edges += [(rng.choice(nodes), rng.choice(nodes)) for _ in range(300)]
    proc = subprocess.run(
        [sys.executable, spark_components.__file__],
        input=json.dumps(edges),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    uf = UnionFind()
    for a, b in edges:
        if a != b:
            uf.union(str(a).zfill(20), str(b).zfill(20))
    expected = {}
    for a, b in edges:
        for n in (a, b):
            if a != b:
                expected[n] = int(uf.find(str(n).zfill(20)))
    assert found == expected


def test_a_spark_that_cannot_start_is_one_line_and_the_output_is_left_as_it_was(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"url": "http://a/1", "text": "a b c " * 100}) + "\n")
    out = tmp_path / "pairs.tsv"
    out.write_text("kept\n")
    proc = run_cli(
        "dedup", str(src), "-o", str(out), "--engine", "spark", "--spark-master", "nowhere://x", *QUIET, check=False
    )
    assert proc.returncode == 1 and out.read_text() == "kept\n" and "Traceback" not in proc.stderr
    (line,) = ours(proc)
    assert line.startswith("scrapy-neardup: Spark did not start on master nowhere://x: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "pairs.tsv"]


def test_spark_submit_on_executors_of_their_own_gives_the_local_runs_components(dumps, tmp_path):
    """``spark-submit --master local-cluster[2,1,1024] .../scrapy_neardup/offline/spark/__main__.py ARGS``:
    dedup's arguments on the session spark-submit started (its --master stands), two executor JVMs with
    Python workers of their own (objects really cross processes), and the local run's pairs, components and
    counts."""
    import scrapy_neardup.offline.spark.__main__ as entry

    jsonl, warc = dumps
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    outputs = ["-o", "pairs.tsv", "--clusters", "clusters.jsonl", "--cluster-mode", "components"]
    proc = subprocess.run(
        [
            submit,
            "--master",
            "local-cluster[2,1,1024]",
            "--conf",
            "spark.ui.enabled=false",
            entry.__file__,
            str(jsonl),
            str(warc),
            *outputs,
            "--threshold",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Spark's PythonRunner joins the driver's stderr to its stdout.
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith('{"documents"')]
    spark = json.loads(line)
    assert spark["engine"] == "spark"
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = summary_of(
        run_cli(
            "dedup",
            str(jsonl),
            str(warc),
            *[str(local_dir / o) if o.endswith((".tsv", ".jsonl")) else o for o in outputs],
            "--threshold",
            "0.5",
        )
    )
    _same_counts(local, spark)
    for name in ("pairs.tsv", "clusters.jsonl"):
        assert (tmp_path / name).read_text() == (local_dir / name).read_text(), name
    assert (tmp_path / "pairs.tsv").read_text()


def test_a_missing_local_input_is_refused_before_spark_starts(tmp_path):
    proc = run_cli(
        "dedup", str(tmp_path / "nowhere.jsonl"), "-o", str(tmp_path / "o.tsv"), "--engine", "spark", check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"scrapy-neardup: {tmp_path / 'nowhere.jsonl'}: no such file"]
