"""What operators met, second round: each test reproduces what they saw and fails on the code before the fix."""

import json
import random
import subprocess
import sys

import pytest

from scrapy_neardup.engine.canonical import declared_canonical


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=300
    )


def _text(seed, words=300):
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(50_000)}" for _ in range(words))


def test_a_head_is_read_as_a_parser_reads_it():
    """Script, style and comment contents are text, not markup: a mention of ``<body>`` there ends nothing,
    and a ``<link>`` there declares nothing."""
    link = '<link rel="canonical" href="/article/1">'
    for hiding in (
        "<script>// add the banner after the opening <body> tag</script>",
        "<script type='text/javascript'>document.write('</head><body>')</script>",
        "<style>/* <body class=x> */ body { color: red }</style>",
        "<!-- the <body> starts below -->",
        "<title>What <body> means</title>",
        "<noscript><p>enable scripts</p></noscript>",
    ):
        html = f"<html><head>{hiding}{link}</head><body>b</body></html>"
        assert declared_canonical(html, "http://site.test/amp/1") == "http://site.test/article/1", hiding
    # A link inside a script, a comment or a style is not a declaration.
    for hidden in (f"<script>var s = '{link}';</script>", f"<!-- {link} -->", f"<style>/* {link} */</style>"):
        assert declared_canonical(f"<head>{hidden}</head>", "http://h/") is None, hidden
    # An unclosed script or comment: nothing after it is markup.
    assert declared_canonical(f"<head><script>var a = 1; {link}", "http://h/") is None
    assert declared_canonical(f"<head><!-- {link}", "http://h/") is None
    # The head still ends at the body's start tag, the script's end tag being found by its name only.
    assert declared_canonical("<head><script>a</scriptx></script><body><link rel=canonical href=/x>", "h") is None
    assert (
        declared_canonical("<head><SCRIPT>x</SCRIPT ><link rel=canonical href=/y></head>", "http://h/") == "http://h/y"
    )


def test_dedup_takes_a_canonical_declared_after_a_script_that_mentions_the_body_tag(tmp_path):
    """Two URLs of one article, the AMP copy first, both declaring the article after a cookie banner's script:
    the article is the group's page, as it is without that word in the comment."""
    text = _text(11)
    for comment in ("add the banner after the opening <body> tag", "add the banner after the opening tag"):
        html = (
            f"<html><head><script>// {comment}</script>"
            '<link rel="canonical" href="http://site.test/article/1"></head>'
            f"<body><article><p>{text}</p></article></body></html>"
        )
        src = tmp_path / "pages.jsonl"
        src.write_text(
            "".join(
                json.dumps({"url": u, "html": html}) + "\n"
                for u in ("http://site.test/amp/1", "http://site.test/article/1")
            )
        )
        out = tmp_path / "pairs.tsv"
        proc = run_cli("dedup", str(src), "-o", str(out), "--workers", "1")
        assert proc.returncode == 0, proc.stderr
        assert out.read_text().startswith("http://site.test/amp/1\thttp://site.test/article/1\t"), (
            comment,
            out.read_text(),
        )


@pytest.mark.parametrize("reset", [False, True])
def test_a_file_that_is_not_a_store_is_refused_with_advice_that_works(tmp_path, reset):
    """A text file at the store's path: refused, left as it is, and the message says what will work (another
    path, or removing the file), never the reset that cannot move it."""
    path = tmp_path / "s.sqlite3"
    path.write_text("notes, not a database\n" * 20)
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"url": "u1", "text": _text(1)}) + "\n")
    proc = run_cli(
        "dedup",
        str(src),
        "-o",
        str(tmp_path / "o.tsv"),
        "--store",
        f"sqlite:///{path}",
        *(["--reset"] if reset else []),
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a scrapy-neardup store" in lines[0] and "remove the file" in lines[0], proc.stderr
    assert "NEARDUP_RESET = True" not in proc.stderr and "move it aside" not in proc.stderr
    assert path.read_text() == "notes, not a database\n" * 20
    assert not [
        p.name for p in tmp_path.iterdir() if p.name.startswith("s.sqlite3") and p.name[9:] not in ("", ".lock")
    ]


def test_a_store_path_in_a_folder_that_does_not_exist_is_refused(tmp_path):
    """A typo in a store's folder: refused in one line, nothing made; the same path with its folder made works."""
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"url": "u1", "text": _text(1)}) + "\n")
    folder = tmp_path / "no" / "such"
    proc = run_cli("dedup", str(src), "-o", str(tmp_path / "o.tsv"), "--store", f"sqlite:///{folder}/x.sqlite3")
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "does not exist" in proc.stderr, proc.stderr
    assert not (tmp_path / "no").exists() and not (tmp_path / "o.tsv").exists()
    folder.mkdir(parents=True)
    proc = run_cli("dedup", str(src), "-o", str(tmp_path / "o.tsv"), "--store", f"sqlite:///{folder}/x.sqlite3")
    assert proc.returncode == 0, proc.stderr


def _manifest(tmp_path, kinds):
    """Three clusters of three pages (an article, a near copy, an unrelated page in a cluster of its own),
    whose kinds are ``kinds``, and a page of another cluster that is the near copy of nothing."""
    rows = []
    for c in range(3):
        text = _text(100 + c)
        words = text.split()
        for i, kind in enumerate(kinds):
            body = text if i == 0 else " ".join(words[:-4] + ["x", "y", "z", "q"]) if i == 1 else _text(200 + c)
            name = f"c{c}-{i}.html"
            (tmp_path / name).write_text(f"<html><body><article><p>{body}</p></article></body></html>")
            rows.append(
                {"id": len(rows), "url": f"http://e.test/{c}/{i}", "file": name, "cluster": f"c{c}", "kind": kind}
            )
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest


@pytest.mark.parametrize("kinds", [("original", "edit", "rewrite"), ("article", "edit", "rewrite")])
def test_evaluate_counts_recall_per_kind_and_missed_pages_whatever_the_originals_are_called(tmp_path, kinds):
    """The third page of each cluster is its own text: missed. With no page of kind ``original`` each
    cluster's first page stands for it, said in a WARNING; per-kind recall and the missed lines are written."""
    manifest = _manifest(tmp_path, kinds)
    errors = tmp_path / "errors.jsonl"
    proc = run_cli("evaluate", str(manifest), "--json", "--workers", "1", "--errors", str(errors))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout.splitlines()[0])
    assert row["kind_recall"] == {"edit": 1.0, "rewrite": 0.0}
    missed = [json.loads(line) for line in errors.read_text().splitlines()]
    assert sorted(r["url"] for r in missed if r["type"] == "missed") == [f"http://e.test/{c}/2" for c in range(3)]
    assert {r["original"] for r in missed} == {f"http://e.test/{c}/0" for c in range(3)}
    warned = "has kind 'original'" in proc.stderr
    assert warned == (kinds[0] != "original"), proc.stderr


def test_a_bad_json_line_is_said_in_plain_words(tmp_path):
    src = tmp_path / "t.jsonl"
    good = json.dumps({"url": "u2", "text": _text(2)})
    src.write_text(good + '\n{"url": "u1" "text": "x"}\n{"url": "u0", "text": "unterminated')
    proc = run_cli("dedup", str(src), "-o", str(tmp_path / "o.tsv"))
    assert proc.returncode == 0, proc.stderr
    assert "(expecting ',' delimiter at column 14)" in proc.stderr, proc.stderr
    assert "(unterminated string starting at column 23)" in proc.stderr, proc.stderr


def test_a_rerun_of_dedup_over_one_store_writes_the_final_groups_of_the_first(tmp_path):
    """An article met over http after two of its copies, then better copies of other groups: the first run's
    groups are re-pointed as better copies arrive (the http article over the https print view and revision),
    and the first run's outputs already name each group's final page, so a rerun over the store writes them
    byte for byte. The article, not its comments or print view or revision, is its group's page."""
    rows = []
    for n in range(4):
        text = _text(300 + n)
        site = f"news{n}.test"
        urls = [
            f"https://{site}/a/{n}/comments",
            f"https://{site}/a/{n}/?utm_source=feed",
            f"https://{site}/a/{n}/print",
            f"http://{site}/a/{n}/",
            f"https://{site}/a/{n}/?rev=2",
            f"https://mirror.{site}/a/{n}/",
        ]
        for i, url in enumerate(urls):
            words = text.split()
            body = " ".join(words[: len(words) - i]) if i % 2 else text
            rows.append({"url": url, "text": body})
    rows.sort(key=lambda r: (r["url"].count("/"), r["url"]))  # groups interleaved, copies before articles
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    outputs = []
    for run in range(3):
        pairs, clusters = tmp_path / f"p{run}.tsv", tmp_path / f"c{run}.jsonl"
        proc = run_cli(
            "dedup", str(src), "-o", str(pairs), "--clusters", str(clusters), "--store", store, "--workers", "1"
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append((pairs.read_text(), clusters.read_text()))
    assert outputs[0] == outputs[1] == outputs[2]
    groups = [json.loads(line) for line in outputs[0][1].splitlines()]
    assert sorted(g["canonical"] for g in groups) == [f"http://news{n}.test/a/{n}/" for n in range(4)], groups
    lines = outputs[0][0].splitlines()
    assert len(lines) == 4 * 5 and all(line.split("\t")[1].startswith("http://") for line in lines), lines


def test_a_rerun_reads_unchanged_documents_verdicts_from_the_store_without_extracting_them(tmp_path):
    """A document met again with the bytes it was filed with is seen without extraction; one whose bytes
    changed is decided again. The outputs are those of a run that extracts every document."""
    rows = [
        {
            "url": f"http://e.test/{n}",
            "html": f"<html><body><article><p>{_text(500 + n % 7)}</p></article></body></html>",
        }
        for n in range(20)
    ]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    summaries, outputs = [], []
    for run in range(2):
        out = tmp_path / f"p{run}.tsv"
        proc = run_cli("dedup", str(src), "-o", str(out), "--store", store, "--workers", "1")
        assert proc.returncode == 0, proc.stderr
        summaries.append(json.loads(proc.stderr.strip().splitlines()[-1]))
        outputs.append(out.read_text())
    assert summaries[0]["unchanged"] == 0 and summaries[1]["seen"] == summaries[1]["unchanged"] == 20
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 20 - 7
    rows[3]["html"] = rows[3]["html"].replace("<p>", "<p>an added sentence. ")  # other bytes, the same page
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_cli("dedup", str(src), "-o", str(tmp_path / "p2.tsv"), "--store", store, "--workers", "1")
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert summary["seen"] == 20 and summary["unchanged"] == 19, summary
    assert (tmp_path / "p2.tsv").read_text() == outputs[0]
