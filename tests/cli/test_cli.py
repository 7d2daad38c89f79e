"""The ``scrapy-neardup`` command on real files: JSONL, a WARC written with warcio, a labelled set."""

import gzip
import io
import json
import os
import random
import subprocess
import sys

import pytest
from demo_site import build_site
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from scrapy_neardup.offline.evaluation import score

SITE = "http://demo.test"


def run_cli(*args, check=True, env=None):
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=None if env is None else {**os.environ, **env},
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def demo_pages():
    pages, groups = build_site()
    html_pages = {p: body.decode() for p, (ctype, body) in pages.items() if ctype.startswith("text/html; charset")}
    return html_pages, groups


def expected_pairs(groups):
    return {frozenset((SITE + a, SITE + b)) for g in groups for a in g for b in g if a != b}


def closure_pairs(pairs):
    from scrapy_neardup.engine.cluster import clusters

    return {frozenset((a, b)) for c in clusters(pairs, "components") for a in c for b in c if a != b}


def test_version_and_help():
    assert run_cli("--version").stdout.strip().startswith("scrapy-neardup ")
    out = run_cli("--help").stdout
    assert "dedup" in out and "evaluate" in out and "tune" in out


def test_dedup_jsonl_html_finds_the_groups(demo_pages, tmp_path):
    pages, groups = demo_pages
    src = tmp_path / "crawl.jsonl"
    with open(src, "w") as f:
        for path in sorted(pages):
            f.write(json.dumps({"url": SITE + path, "html": pages[path]}) + "\n")
        f.write("not json\n")
        f.write(json.dumps({"url": SITE + "/no-body"}) + "\n")
    out, clusters_file = tmp_path / "pairs.tsv", tmp_path / "clusters.jsonl"
    proc = run_cli("dedup", str(src), "-o", str(out), "--clusters", str(clusters_file), "--workers", "2")
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert summary["unreadable"] == 2 and summary["documents"] == len(pages)
    pairs = [line.split("\t") for line in out.read_text().splitlines()]
    assert all(0.45 <= float(sim) <= 1.0 for _, _, sim in pairs)
    found = closure_pairs([(a, b) for a, b, _ in pairs])
    found.discard(frozenset((SITE + "/index.html", SITE + "/")))
    assert found == expected_pairs(groups)
    clusters = [json.loads(line) for line in clusters_file.read_text().splitlines()]
    assert sorted(len(c["members"]) for c in clusters) == sorted(len(g) for g in groups)
    assert all(c["canonical"] == c["members"][0] for c in clusters)


def test_dedup_text_input_and_store_reuse(tmp_path):
    words = [f"w{i}" for i in range(400)]
    docs = [
        {"url": "u1", "text": " ".join(words)},
        {"url": "u2", "text": " ".join(words[:-3] + ["x", "y", "z"])},
        {"url": "u3", "text": " ".join(reversed(words))},
        {"url": "u4", "text": "too short"},
    ]
    src = tmp_path / "texts.jsonl.gz"
    with gzip.open(src, "wt") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    out = tmp_path / "p.tsv"
    proc = run_cli("dedup", str(src), "-o", str(out), "--store", store, "--workers", "1")
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert (summary["unique"], summary["duplicate"], summary["skipped"]) == (2, 1, {"too_little_text": 1})
    assert out.read_text().split("\t")[:2] == ["u2", "u1"]
    again = json.loads(run_cli("dedup", str(src), "-o", str(out), "--store", store).stderr.strip().splitlines()[-1])
    assert again["seen"] == 3 and again["unique"] == 0
    mismatch = run_cli("dedup", str(src), "-o", str(out), "--store", store, "--num-perm", "64", check=False)
    assert mismatch.returncode != 0 and "num_perm: stored 128, configured 64" in mismatch.stderr
    # Signatures of the other sketch are never misread: refused, naming it.
    other = run_cli("dedup", str(src), "-o", str(out), "--store", store, "--sketch", "permutations", check=False)
    assert other.returncode != 0 and 'sketch: stored "one-permutation", configured (none)' in other.stderr


@pytest.mark.parametrize("reader", ["fastwarc", "warcio"])
def test_dedup_warc(demo_pages, tmp_path, reader):
    pages, groups = demo_pages
    path = tmp_path / "crawl.warc.gz"
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for p in sorted(pages):
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            record = writer.create_warc_record(
                SITE + p, "response", payload=io.BytesIO(pages[p].encode()), http_headers=headers
            )
            writer.write_record(record)
        headers = StatusAndHeaders("200 OK", [("Content-Type", "image/png")], protocol="HTTP/1.1")
        writer.write_record(
            writer.create_warc_record(SITE + "/x.png", "response", payload=io.BytesIO(b"\x89PNG"), http_headers=headers)
        )
        # Three "not found" pages, one text: a crawl checks no non-2xx response, and neither does dedup.
        missing = "<html><body><article><p>" + " ".join(f"gone{i}" for i in range(300)) + "</p></article></body></html>"
        for i in range(3):
            headers = StatusAndHeaders("404 Not Found", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(
                    f"{SITE}/missing/{i}", "response", payload=io.BytesIO(missing.encode()), http_headers=headers
                )
            )
    out = tmp_path / "pairs.tsv"
    proc = run_cli(
        "dedup", str(path), "-o", str(out), "--algorithm", "minhash", "--threshold", "0.5", "--warc-reader", reader
    )
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert summary["not_html_records"] == 1 and summary["not_2xx_responses"] == 3
    found = closure_pairs([tuple(line.split("\t")[:2]) for line in out.read_text().splitlines()])
    found.discard(frozenset((SITE + "/index.html", SITE + "/")))
    assert found == expected_pairs(groups)


def test_redis_store_urls_of_every_scheme_are_said_in_one_line(tmp_path):
    """Each Redis scheme needs --spider (or --redis-key); an unreachable cluster is one line, not a traceback."""
    for scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        proc = run_cli("store", f"{scheme}://127.0.0.1:1/", "count", check=False)
        assert proc.returncode != 0 and "pass --spider NAME" in proc.stderr, (scheme, proc.stderr)
    proc = run_cli("store", "--spider", "s", "redis+cluster://127.0.0.1:1/", "count", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "127.0.0.1:1" in proc.stderr


def _write_warc(path, pages):
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for p in sorted(pages):
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(
                    SITE + p, "response", payload=io.BytesIO(pages[p].encode()), http_headers=headers
                )
            )


def test_a_failing_run_says_one_line_and_leaves_the_outputs_as_they_were(demo_pages, tmp_path):
    pages, _ = demo_pages
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"url": SITE + p, "html": pages[p]}) + "\n" for p in sorted(pages)))
    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(gzip.compress(good.read_bytes())[:-200])
    _write_warc(tmp_path / "whole.warc.gz", pages)
    data = (tmp_path / "whole.warc.gz").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "lines.warc").write_bytes(good.read_bytes())
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    run_cli("dedup", str(good), "-o", str(tmp_path / "first.tsv"), "--store", store, "--workers", "1")
    out, clusters_file = tmp_path / "pairs.tsv", tmp_path / "clusters.jsonl"
    cases = [
        ([str(tmp_path / "missing.jsonl")], "missing.jsonl: no such file"),
        ([str(tmp_path)], "not a file"),
        ([str(good), str(corrupt)], "corrupt.jsonl.gz: reading stopped after line"),
        ([str(tmp_path / "cut.warc.gz")], "cut.warc.gz: truncated: the file ends inside record"),
        ([str(tmp_path / "lines.warc")], "lines.warc: not a WARC file"),
        ([str(good), "--store", store, "--num-perm", "64"], "num_perm: stored 128, configured 64"),
    ]
    for inputs, message in cases:
        out.write_text("old pairs\n")
        clusters_file.write_text("old clusters\n")
        proc = run_cli(
            "dedup", *inputs, "-o", str(out), "--clusters", str(clusters_file), "--workers", "2", check=False
        )
        assert proc.returncode == 1, (inputs, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scrapy-neardup: ") and message in lines[0], proc.stderr
        assert out.read_text() == "old pairs\n" and clusters_file.read_text() == "old clusters\n"
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]
    assert "--reset" in proc.stderr and "NEARDUP_" not in proc.stderr  # the CLI's own words for a mismatch
    # The same outputs are replaced whole by a run that succeeds, keeping the file's mode.
    os.chmod(out, 0o640)
    run_cli("dedup", str(tmp_path / "whole.warc.gz"), "-o", str(out), "--clusters", str(clusters_file))
    assert "old pairs" not in out.read_text() and out.read_text().count("\t") >= 2
    assert os.stat(out).st_mode & 0o777 == 0o640


def test_dedup_bad_options_name_the_problem(tmp_path):
    proc = run_cli("dedup", "x.jsonl", "-o", str(tmp_path / "o"), "--threshold", "2", check=False)
    assert proc.returncode != 0 and "NEARDUP_THRESHOLD = 2.0 is not allowed" in proc.stderr


def test_tune_prints_bands_and_errors(tmp_path):
    out = run_cli("tune", "--threshold", "0.8", "--num-perm", "128").stdout
    assert "bands x" in out and "false-negative area" in out
    assert "0.80 |" in out


def test_evaluate_on_a_small_labelled_set(demo_pages, tmp_path):
    pages, groups = demo_pages
    rows = []
    in_group = {p: i for i, g in enumerate(groups) for p in g}
    kinds = ["original", "mirror", "print", "syndicate", "noise", "edit"]
    for n, path in enumerate(sorted(p for p in pages if p.endswith(".html") or "utm" in p)):
        name = f"p{n:03d}.html.gz"
        (tmp_path / name).write_bytes(gzip.compress(pages[path].encode()))
        cluster = f"g{in_group[path]}" if path in in_group else f"s{n}"
        kind = kinds[groups[in_group[path]].index(path)] if path in in_group else "original"
        rows.append({"id": n, "url": SITE + path, "file": name, "cluster": cluster, "kind": kind})
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    errors = tmp_path / "errors.jsonl"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run_cli("evaluate", str(manifest), "--all", "--json", "--workers", "1", env={"TMPDIR": str(scratch)})
    assert list(scratch.iterdir()) == []  # the lexicon I-Match was given is gone with the run
    run_cli("evaluate", str(manifest), "--algorithm", "exact", "--json", "--workers", "1", "--errors", str(errors))
    records = [json.loads(line) for line in errors.read_text().splitlines()]
    # The exact hash finds mirrors only, so each edited copy is reported missed.
    missed = {r["url"] for r in records if r["type"] == "missed"}
    assert {SITE + g[kinds.index("edit")] for g in groups if len(g) > kinds.index("edit")} <= missed
    assert not {SITE + g[kinds.index("mirror")] for g in groups} & missed
    by_name = {r["name"]: r for r in map(json.loads, result.stdout.splitlines())}
    from scrapy_neardup.engine.algorithms import algorithm_names

    assert set(by_name) == set(algorithm_names())
    assert by_name["minhash"]["f1"] > 0.95 and by_name["minhash"]["kind_recall"]["mirror"] == 1.0
    assert by_name["exact"]["precision"] == 1.0 and by_name["exact"]["kind_recall"]["mirror"] == 1.0
    assert by_name["exact"]["kind_recall"]["edit"] == 0.0  # identical text only
    for name in ("bottomk", "spotsigs", "supershingle", "imatch"):
        assert by_name[name]["kind_recall"]["mirror"] == 1.0, name


def test_lexicon_command_writes_mid_idf_terms(tmp_path):
    docs = [{"url": f"u{i}", "text": f"common words everywhere rare{i} shared{i % 3} " * 5} for i in range(12)]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "lexicon.txt"
    run_cli("lexicon", str(src), "-o", str(out), "--low", "0.0", "--high", "0.99")
    terms = out.read_text().split()
    assert "shared0" in terms and "rare3" not in terms  # rare3 is in one document only (min-df 2)


def test_score_matches_a_brute_force_pair_count():
    import itertools
    import random

    rng = random.Random(3)
    manifest = [
        {"url": f"u{i}", "cluster": f"c{i // 3}", "kind": "original" if i % 3 == 0 else "edit"} for i in range(60)
    ]
    pairs = [(f"u{rng.randrange(60)}", f"u{rng.randrange(60)}") for _ in range(40)]
    got = score(manifest, pairs)
    from scrapy_neardup.engine.cluster import UnionFind

    uf = UnionFind()
    for a, b in pairs:
        uf.union(a, b)
    pred = {
        frozenset(p) for p in itertools.combinations([r["url"] for r in manifest], 2) if uf.find(p[0]) == uf.find(p[1])
    }
    gold = {
        frozenset((a["url"], b["url"])) for a, b in itertools.combinations(manifest, 2) if a["cluster"] == b["cluster"]
    }
    assert got.precision == pytest.approx(len(pred & gold) / len(pred))
    assert got.recall == pytest.approx(len(pred & gold) / len(gold))


def test_error_report_lists_false_merges_with_their_cost_and_missed_pages():
    from scrapy_neardup.offline.evaluation import error_report

    manifest = [{"url": f"a{i}", "cluster": "A", "kind": "original" if i == 0 else "edit"} for i in range(3)]
    manifest += [{"url": f"b{i}", "cluster": "B", "kind": "original" if i == 0 else "print"} for i in range(2)]
    manifest += [{"url": "t", "cluster": "T", "kind": "teaser"}]
    pairs = [("a1", "a0", 0.9), ("b0", "a0", 0.5), ("b1", "b0", 0.8), ("t", "x-not-in-set", 0.7)]
    report = error_report(manifest, pairs)
    merges = [r for r in report if r["type"] == "false_merge"]
    assert merges == [
        {
            "type": "false_merge",
            "clusters": ["A", "B"],
            "false_pairs": 2 * 2,
            "edges": [{"url_a": "b0", "kind_a": "original", "url_b": "a0", "kind_b": "original", "similarity": 0.5}],
        }
    ]
    assert [(r["url"], r["original"]) for r in report if r["type"] == "missed"] == [("a2", "a0")]
    assert score(manifest, [(a, b) for a, b, _ in pairs]).true_pairs == 1 + 1  # a0-a1, b0-b1


@pytest.mark.parametrize("workers", ["1", "2"])
def test_dedup_makes_the_template_decisions_of_a_crawl_whatever_the_workers(tmp_path, workers):
    """The guard decides in the main process, in input order: with two workers as with one, a template
    site's articles all stay apart, and the first article, filed before the guard fired, finds its copy."""
    from helpers.sitegen import template_page

    pages = [(f"http://site.example/story-{i}", template_page(i)) for i in range(5)]
    pages.append(("http://site.example/copies/story-0", template_page(0)))
    src = tmp_path / "site.jsonl"
    src.write_text("".join(json.dumps({"url": u, "html": h}) + "\n" for u, h in pages))
    out = tmp_path / "pairs.tsv"
    run_cli("dedup", str(src), "-o", str(out), "--workers", workers)
    pairs = [line.split("\t")[:2] for line in out.read_text().splitlines() if line and not line.startswith("#")]
    assert pairs == [["http://site.example/copies/story-0", "http://site.example/story-0"]]


def test_all_pairs_reports_every_pair_above_the_threshold(tmp_path):
    import random

    from scrapy_neardup.assembly import build_pipeline
    from scrapy_neardup.settings import Config

    rng = random.Random(7)
    docs = []
    for group in range(4):  # groups of 2 to 5 lightly edited copies, then distinct documents
        base = [f"w{rng.randrange(10**6)}" for _ in range(150)]
        for copy in range(2 + group):
            words = list(base)
            for i in rng.sample(range(150), 3 * copy):
                words[i] = f"x{rng.randrange(10**6)}"
            docs.append((f"http://a/{group}/{copy}", " ".join(words)))
    docs += [(f"http://b/{i}", " ".join(f"w{rng.randrange(10**6)}" for _ in range(150))) for i in range(20)]
    rng.shuffle(docs)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"url": u, "text": t}) + "\n" for u, t in docs))
    star, everything = tmp_path / "star.tsv", tmp_path / "all.tsv"
    run_cli("dedup", str(src), "-o", str(star))
    run_cli("dedup", str(src), "-o", str(everything), "--all-pairs")
    pipeline = build_pipeline(Config.from_settings({"NEARDUP_ENABLED": True}))
    fps = {u: pipeline.from_text(t).fingerprint.signature for u, t in docs}
    order = [u for u, _ in docs]
    brute = {}
    for i, a in enumerate(order):
        for b in order[:i]:
            similarity = pipeline.algorithm.similarity(fps[a], fps[b])
            if similarity >= pipeline.algorithm.threshold:
                brute[(a, b)] = similarity
    found = {(a, b): float(s) for a, b, s in (line.split("\t") for line in everything.read_text().splitlines())}
    assert set(found) <= set(brute)  # every pair reported is a real pair, later document first
    assert {p for p, s in brute.items() if s >= 0.6} <= set(found)  # LSH misses none this close
    assert sum(n * (n - 1) // 2 for n in (2, 3, 4, 5)) == len(found) > len(star.read_text().splitlines())
    assert all(abs(found[p] - brute[p]) < 1e-4 for p in found)


def test_evaluate_scores_a_users_own_judged_pairs(demo_pages, tmp_path):
    """A manifest of pages with no clusters, and pairs a person judged: the crawl's own labels."""
    pages, groups = demo_pages
    group = groups[0]
    others = sorted(p for p in pages if p.startswith("/news/") and p not in {q for g in groups for q in g})[:3]
    rows = []
    for n, path in enumerate(group + others):
        name = f"p{n:03d}.html"
        (tmp_path / name).write_text(pages[path])
        rows.append({"id": n, "url": SITE + path, "file": name})
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    judged = tmp_path / "judged.tsv"
    lines = ["# url_a, url_b, 1: near-duplicates"]
    lines += [f"{SITE}{group[0]}\t{SITE}{p}\t1" for p in group[1:]]
    lines += [f"{SITE}{group[0]}\t{SITE}{p}\t0" for p in others]
    judged.write_text("\n".join(lines) + "\n")
    result = run_cli("evaluate", str(manifest), "--json", "--workers", "1", "--judged", str(judged))
    row = json.loads(result.stdout.splitlines()[0])
    assert row["judged"]["pairs"] == len(group) - 1 + len(others)
    assert row["judged"]["positives"] == len(group) - 1
    assert row["judged"]["precision"] == 1.0 and row["judged"]["recall"] == 1.0
    # Judged the other way round, every predicted pair is a false one: the score must say so.
    judged.write_text("\n".join(line[:-1] + ("0" if line.endswith("1") else "1") for line in lines[1:]) + "\n")
    flipped = json.loads(
        run_cli("evaluate", str(manifest), "--json", "--workers", "1", "--judged", str(judged)).stdout.splitlines()[0]
    )
    assert flipped["judged"]["precision"] == 0.0 and flipped["judged"]["recall"] == 0.0
    table = run_cli("evaluate", str(manifest), "--workers", "1", "--judged", str(judged)).stdout
    assert "judged F1" in table.splitlines()[0]
    judged.write_text("a\tb\tmaybe\n")
    bad = run_cli("evaluate", str(manifest), "--workers", "1", "--judged", str(judged), check=False)
    assert bad.returncode == 1 and "judged.tsv:1: expected url_a<TAB>url_b<TAB>0 or 1" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_run_that_read_no_document_fails_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "pairs.tsv"
    out.write_text("an earlier run's pairs\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    unreadable = tmp_path / "bad.jsonl"
    unreadable.write_text(
        '[1, 2]\n{"html": "<p>x</p>"}\nnot json\n{"url": 7, "text": "t"}\n{"url": "u"}\n{"url": "u", "html": 5}\n'
    )
    for source, what in ((empty, "(empty)"), (unreadable, "(6 unreadable lines)")):
        proc = run_cli("dedup", str(source), "-o", str(out), check=False)
        assert proc.returncode == 1, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("scrapy-neardup: no document read from") and what in last, proc.stderr
        assert out.read_text() == "an earlier run's pairs\n"  # not truncated
    messages = run_cli("dedup", str(unreadable), "-o", str(out), check=False).stderr
    for expected in (
        "bad.jsonl:1: line passed over: a list, not a JSON object",
        'bad.jsonl:2: line passed over: no "url" field',
        "bad.jsonl:3: line passed over: not JSON (expecting value at column 1)",
        'bad.jsonl:4: line passed over: "url" is a number, not a non-empty string',
        'bad.jsonl:5: line passed over: no "html" or "text" field',
        'bad.jsonl:6: line passed over: "html" is a number, not a string',
    ):
        assert expected in messages, messages
    assert "KeyError" not in messages and "'url'" not in messages and "list indices" not in messages
    allowed = run_cli("dedup", str(empty), "-o", str(out), "--allow-empty")
    assert allowed.returncode == 0 and out.read_text() == ""
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("\n")
    proc = run_cli("evaluate", str(manifest), check=False)
    assert proc.returncode == 1 and "no page in the manifest" in proc.stderr


def test_a_rerun_on_the_same_store_writes_the_same_pairs(tmp_path):
    words = [f"w{i}" for i in range(400)]
    docs = [
        {"url": "u1", "text": " ".join(words)},
        {"url": "u2", "text": " ".join(words[:-3] + ["x", "y", "z"])},
        {"url": "u3", "text": " ".join(reversed(words))},
        {"url": "u4", "text": " ".join(words[3:])},
    ]
    src = tmp_path / "texts.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    first, again, new = (tmp_path / name for name in ("first.tsv", "again.tsv", "new.tsv"))
    clusters = tmp_path / "clusters.jsonl"
    run_cli("dedup", str(src), "-o", str(first), "--store", store, "--workers", "1")
    run_cli("dedup", str(src), "-o", str(again), "--store", store, "--workers", "1", "--clusters", str(clusters))
    assert first.read_text() == again.read_text() and len(first.read_text().splitlines()) == 2
    assert json.loads(clusters.read_text().splitlines()[0])["members"] == ["u1", "u2", "u4"]
    run_cli("dedup", str(src), "-o", str(new), "--store", store, "--workers", "1", "--only-new")
    assert new.read_text() == ""


def test_a_canonical_declared_past_the_heads_first_64_kb_decides_the_direction(tmp_path):
    """Two URLs of one page; the HTML declares the longer one canonical after a 70,000-character meta tag
    (real heads run that long). The declaration, not the order met or the shorter path, makes it the
    group's page."""
    rng = random.Random(5)
    text = " ".join(f"w{rng.randrange(50_000)}" for _ in range(300))
    canonical = "http://e.com/news/2026/a"
    html = (
        f'<html><head><meta name="x" content="{"y" * 70_000}"><link rel="canonical" href="{canonical}">'
        f"</head><body><article><p>{text}</p></article></body></html>"
    )
    src = tmp_path / "pages.jsonl"
    src.write_text("".join(json.dumps({"url": url, "html": html}) + "\n" for url in ("http://e.com/a", canonical)))
    out = tmp_path / "pairs.tsv"
    run_cli("dedup", str(src), "-o", str(out), "--workers", "1")
    assert out.read_text().startswith(f"http://e.com/a\t{canonical}\t"), out.read_text()


def _story_page(seed):
    rng = random.Random(seed)
    text = " ".join(f"w{rng.randrange(50_000)}" for _ in range(300))
    return f"<html><head><title>t</title></head><body><article><p>{text}</p></article></body></html>".encode()


@pytest.mark.parametrize("reader", ["fastwarc", "warcio"])
def test_warc_and_arc_files_as_they_are_found_are_read(tmp_path, reader):
    """A WARC gzipped as one stream (not a member per record), and an ARC file with a space in a URL: both
    valid, both read; a WARC cut short is still said to be truncated, in one line."""
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=False)
    for url, seed in (("http://a/1", 1), ("http://a/2", 1), ("http://a/3", 2)):
        headers = StatusAndHeaders(
            "200 OK",
            [("Content-Type", "text/html; charset=utf-8"), ("Link", '<http://a/1>; rel="canonical"')],
            protocol="HTTP/1.0",
        )
        writer.write_record(
            writer.create_warc_record(url, "response", payload=io.BytesIO(_story_page(seed)), http_headers=headers)
        )
    single = tmp_path / "single.warc.gz"
    single.write_bytes(gzip.compress(buffer.getvalue()))
    arc = tmp_path / "space.arc"
    description = b"1 0 test\nURL IP-address Archive-date Content-type Archive-length\n"
    data = f"filedesc://space.arc 0.0.0.0 20260101000000 text/plain {len(description)}\n".encode() + description
    for url, seed in (("http://a/with space/1", 3), ("http://a/4", 3)):
        http = b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n" + _story_page(seed)
        data += b"\n" + f"{url} 127.0.0.1 20260101000000 text/html {len(http)}\n".encode() + http
    arc.write_bytes(data + b"\n")
    # The ARC's second page is the better copy (a shorter path): the group is re-pointed to it, and the first
    # page is written as its near-duplicate.
    for source, pair in ((single, "http://a/2\thttp://a/1"), (arc, "http://a/with%20space/1\thttp://a/4")):
        out = tmp_path / f"{source.name}.tsv"
        proc = run_cli("dedup", str(source), "-o", str(out), "--warc-reader", reader, check=False)
        assert proc.returncode == 0, proc.stderr
        assert out.read_text().startswith(pair), out.read_text()
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(single.read_bytes()[:-300])
    proc = run_cli("dedup", str(cut), "-o", str(tmp_path / "cut.tsv"), "--warc-reader", reader, check=False)
    assert proc.returncode == 1 and "truncated" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "--allow-truncated" in proc.stderr


@pytest.mark.parametrize("reader", ["fastwarc", "warcio"])
def test_a_warc_cut_mid_record_can_be_used_up_to_the_cut_when_asked(tmp_path, reader):
    """A .warc.gz of a gzip member a record, cut inside its sixth: refused, naming the five complete records
    and the option; with --allow-truncated, those five are deduplicated and the cut is said loudly."""
    path = tmp_path / "crawl.warc.gz"
    rng = random.Random(9)
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for i, seed in enumerate((1, 1, 2, 2, 3, 4)):
            # A comment that does not compress: records as large as real ones, past the readers' buffers.
            padding = f"<!-- {rng.randbytes(60_000).hex()} -->".encode()
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(
                    f"http://a/{i}", "response", payload=io.BytesIO(_story_page(seed) + padding), http_headers=headers
                )
            )
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(path.read_bytes()[:-300])
    refused = run_cli("dedup", str(cut), "-o", str(tmp_path / "no.tsv"), "--warc-reader", reader, check=False)
    assert refused.returncode == 1 and "after 5 complete records" in refused.stderr
    assert "--allow-truncated" in refused.stderr and not (tmp_path / "no.tsv").exists()
    out = tmp_path / "pairs.tsv"
    proc = run_cli("dedup", str(cut), "-o", str(out), "--warc-reader", reader, "--allow-truncated", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "TRUNCATED" in proc.stderr and "after 5 complete records" in proc.stderr
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert summary["truncated"] == [str(cut)] and summary["documents"] == 5
    assert [line.split("\t")[:2] for line in out.read_text().splitlines()] == [
        ["http://a/1", "http://a/0"],
        ["http://a/3", "http://a/2"],
    ]


def test_the_progress_line_gives_the_share_read_and_the_time_left(tmp_path):
    words = [f"w{i}" for i in range(5000)]
    rng = random.Random(3)
    src = tmp_path / "many.jsonl"
    src.write_text(
        "".join(json.dumps({"url": f"u{i}", "text": " ".join(rng.sample(words, 300))}) + "\n" for i in range(3000))
    )
    proc = run_cli("dedup", str(src), "-o", str(tmp_path / "p.tsv"), "--progress", "--workers", "1")
    # Text mode reads the line's carriage returns as line ends.
    lines = [line for line in proc.stderr.splitlines() if "documents" in line and "docs/s" in line]
    assert lines, proc.stderr
    assert any("%, " in line and " left)" in line for line in lines[:-1]), lines[:3]
    assert lines[-1].startswith("3,000 documents, ")


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, grandchildren, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_dedup_loses_no_document_when_a_worker_is_killed(demo_pages, tmp_path):
    """dedup's extraction runs in the crawl's runtime: a worker killed mid-run (SIGKILL, as the kernel's
    out-of-memory killer would) is replaced, the batch it held is done again, and the verdicts are those of
    an undisturbed run."""
    import signal
    import time

    html_pages, _ = demo_pages
    rng = random.Random(3)
    bodies = list(html_pages.values())
    rows = [{"url": f"http://site{i % 7}.example/p{i}", "html": rng.choice(bodies)} for i in range(700)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows))
    calm, killed = tmp_path / "calm.tsv", tmp_path / "killed.tsv"
    run_cli("dedup", str(src), "-o", str(calm), "--workers", "2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", "dedup", str(src), "-o", str(killed), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and proc.poll() is None and time.monotonic() < deadline:
        # The workers: forked from the command itself, or from the fork server (the replacements).
        workers = [p for p in _descendants(proc.pid) if not _helper_process(p)]
        if workers:
            time.sleep(0.3)  # let it take a batch
            victim = workers[0]
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=300)
    assert victim is not None, "no worker process was seen"
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert killed.read_text() == calm.read_text()


def _helper_process(pid: int) -> bool:
    """multiprocessing's own processes (the fork server, the resource tracker), not workers."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return True
    return b"forkserver" in cmdline or b"resource_tracker" in cmdline
