"""Pairwise precision, recall and F1 against labelled clusters (the neardup-dev manifest format).

Same definition as the reference scorer ``score.py`` of neardup-dev: predicted pairs are closed
transitively into clusters; a pair counts when both documents share a predicted and a gold cluster;
recall per kind is the share of documents of that kind found in the same predicted cluster as their
cluster's original. Counted through cluster intersections instead of listing pairs.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..assembly import build_pipeline, build_template_guard, new_detector
from ..engine.cluster import UnionFind
from ..settings import resolved_workers
from ..workers import ExtractionPool, in_order, worker_pipeline

if TYPE_CHECKING:
    from ..engine.extract import Extraction


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    f1: float
    predicted_pairs: int
    gold_pairs: int
    true_pairs: int
    kind_recall: dict[str, float]


def load_manifest(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cluster_originals(manifest: list[dict]) -> dict[str, str]:
    """Each cluster's original, against which recall per kind and missed pages are counted: its page of kind
    ``original``, else its first page in the manifest (a manifest may name no kind at all)."""
    originals: dict[str, str] = {}
    named: set[str] = set()
    for row in manifest:
        cluster = row.get("cluster")
        if cluster is None or cluster in named:
            continue
        if row.get("kind") == "original":
            originals[cluster] = row["url"]
            named.add(cluster)
        else:
            originals.setdefault(cluster, row["url"])
    return originals


def names_no_original(manifest: list[dict]) -> bool:
    """Whether the manifest has clusters of several pages but no page of kind ``original`` (each cluster's
    first page then stands for it: :func:`cluster_originals`)."""
    sizes = Counter(row.get("cluster") for row in manifest if row.get("cluster") is not None)
    return any(n > 1 for n in sizes.values()) and not any(row.get("kind") == "original" for row in manifest)


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def score(manifest: list[dict], pairs: Iterable[tuple[str, str]]) -> Score:
    urls = {row["url"] for row in manifest}
    uf = UnionFind()
    for a, b in pairs:
        if a in urls and b in urls:
            uf.union(a, b)
    predicted = {row["url"]: uf.find(row["url"]) for row in manifest}
    gold = {row["url"]: row.get("cluster", row["url"]) for row in manifest}  # no cluster: a page alone
    pred_sizes = Counter(predicted.values())
    gold_sizes = Counter(gold.values())
    joint = Counter((predicted[u], gold[u]) for u in urls)
    tp = sum(_pairs(n) for n in joint.values())
    pp = sum(_pairs(n) for n in pred_sizes.values())
    gp = sum(_pairs(n) for n in gold_sizes.values())
    precision = tp / pp if pp else 1.0
    recall = tp / gp if gp else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    originals = cluster_originals(manifest)
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in manifest:
        kind = row.get("kind", "")
        original = originals.get(row.get("cluster", ""))
        if kind in ("", "original", "teaser") or original is None or original == row["url"]:
            continue
        hits[kind][1] += 1
        hits[kind][0] += predicted[row["url"]] == predicted[original]
    kind_recall = {k: h / t for k, (h, t) in sorted(hits.items())}
    return Score(precision, recall, f1, pp, gp, tp, kind_recall)


@dataclass(frozen=True)
class JudgedScore:
    """Precision, recall and F1 on pairs a person judged (``1``: near-duplicates, ``0``: not)."""

    precision: float
    recall: float
    f1: float
    judged: int
    positives: int
    true_pairs: int
    false_pairs: int


def load_judged(path: str) -> list[tuple[str, str, bool]]:
    """Judged pairs from a TSV file: ``url_a<TAB>url_b<TAB>1`` (near-duplicates) or ``0`` (not), one per
    line; blank lines and lines starting with ``#`` are passed over. A malformed line is an error naming it."""
    from .inputs import InputError

    judged = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 3 or fields[2].strip() not in ("0", "1") or not fields[0] or not fields[1]:
                raise InputError(f"{path}:{number}: expected url_a<TAB>url_b<TAB>0 or 1, got {line.strip()[:80]!r}")
            judged.append((fields[0], fields[1], fields[2].strip() == "1"))
    return judged


def score_judged(judged: Iterable[tuple[str, str, bool]], pairs: Iterable[tuple[str, str]]) -> JudgedScore:
    """Score predicted pairs on judged ones. As in :func:`score`, predicted pairs are closed transitively
    into clusters: a judged pair is predicted when both pages end in one cluster."""
    uf = UnionFind()
    for a, b in pairs:
        uf.union(a, b)
    tp = fp = fn = positives = count = 0
    for a, b, same in judged:
        count += 1
        positives += same
        predicted = uf.find(a) == uf.find(b)
        tp += predicted and same
        fp += predicted and not same
        fn += same and not predicted
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return JudgedScore(precision, recall, f1, count, positives, tp, fp)


def error_report(manifest: list[dict], pairs: Iterable[tuple[str, str, float]]) -> list[dict[str, Any]]:
    """What a run got wrong, to read rather than to score: one ``false_merge`` record per pair of gold clusters
    that predicted pairs joined (the edges that joined them, and how many false pairs the merge costs in the
    pairwise count), then one ``missed`` record per page left out of its cluster original's predicted cluster.

    A merge's cost is counted on the final clusters: the product of the two clusters' shares of the predicted
    cluster that holds them (a merge of two clusters of 5 and 3 pages costs 15 false pairs).
    """
    rows = {row["url"]: row for row in manifest}
    pairs = [(a, b, s) for a, b, s in pairs if a in rows and b in rows]
    uf = UnionFind()
    for a, b, _ in pairs:
        uf.union(a, b)
    predicted = {url: uf.find(url) for url in rows}
    members: dict[tuple[str, str], int] = Counter((predicted[u], rows[u]["cluster"]) for u in rows)
    merges: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for a, b, sim in pairs:
        ca, cb = rows[a]["cluster"], rows[b]["cluster"]
        if ca != cb:
            merges[tuple(sorted((ca, cb)))].append(
                {
                    "url_a": a,
                    "kind_a": rows[a]["kind"],
                    "url_b": b,
                    "kind_b": rows[b]["kind"],
                    "similarity": round(sim, 4),
                }
            )
    report: list[dict[str, Any]] = []
    for (ca, cb), edges in sorted(merges.items()):
        root = predicted[edges[0]["url_a"]]
        cost = members[(root, ca)] * members[(root, cb)]
        report.append({"type": "false_merge", "clusters": [ca, cb], "false_pairs": cost, "edges": edges})
    originals = cluster_originals(manifest)
    for row in manifest:
        original = originals.get(row.get("cluster", ""))
        if original is None or original == row["url"] or predicted[row["url"]] == predicted[original]:
            continue
        report.append(
            {
                "type": "missed",
                "cluster": row["cluster"],
                "url": row["url"],
                "kind": row.get("kind", ""),
                "original": original,
            }
        )
    return report


def read_page(path: str) -> bytes:
    """A dataset page's body as the site served it (gzip-compressed files are decompressed)."""
    import gzip

    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


class PageText(NamedTuple):
    """A page's extraction, its seconds (decoding included), and the URL it declares canonical."""

    extraction: Extraction
    seconds: float
    declared: str | None


def extract_page(path: str, url: str) -> PageText:
    """Worker task (:mod:`scrapy_neardup.workers`): a dataset page's text as the worker's pipeline extracts
    it, and its declaration."""
    import time

    from ..engine.canonical import declared_canonical
    from ..engine.extract import decode_html

    body = read_page(path)
    started = time.perf_counter()
    html = decode_html(body)
    got = worker_pipeline().text_of(html, url)
    return PageText(got, time.perf_counter() - started, declared_canonical(html, url))


def extract_pages(manifest: list[dict], base: str, config: Any, workers: int | None = None) -> list[PageText]:
    """Every page of a labelled set (``manifest`` rows, files under ``base``) extracted as ``config``'s
    pipeline extracts it, in the extraction runtime's worker processes, in manifest order."""
    import os

    processes = max(1, resolved_workers(workers or None))
    pool = ExtractionPool(config, processes, timeout=config.worker_timeout, fork_first=True)
    pool.start()
    try:
        pages = [(os.path.join(base, row["file"]), row["url"]) for row in manifest]
        return [done.result() for _, done in in_order(pool, extract_page, pages, 4 * processes)]
    finally:
        pool.close()


def decide_pages(
    manifest: list[dict], config: Any, texts: list[Extraction], declared: list[str | None]
) -> tuple[Any, list[tuple[str, str, float]]]:
    """The near-duplicate pairs ``(page, canonical, similarity)`` of a labelled set's pages, given their
    extractions and declarations, decided in manifest order as a crawl decides them, and the algorithm."""
    from dataclasses import replace

    from ..engine.canonical import may_fetch
    from ..engine.decisions import DecisionLoop, Declared
    from ..store import MemoryStore

    position: dict[str, int] = {}
    for i, row in enumerate(manifest):
        position.setdefault(row["url"], i)
    pipeline = build_pipeline(config)
    algorithm = pipeline.algorithm
    detector = new_detector(config, algorithm, MemoryStore())
    detector.open()
    loop = DecisionLoop(detector, build_template_guard(config, algorithm))
    pairs = []

    def prepared_at(i: int):
        return replace(pipeline.from_extraction(texts[i]), declared_canonical=declared[i])

    for i, row in enumerate(manifest):
        prepared = prepared_at(i)
        if prepared.fingerprint is None:
            continue
        # Declarations as a crawl weighs them (scrapy_neardup.engine.canonical): a declared page later in
        # the set is had first, as a crawl fetches it.
        url, target = row["url"], declared[i] if config.canonical else None
        page: Declared | None = None
        if target and target != url:
            later = position.get(target, -1) > i and may_fetch(config.canonical_fetch, url, target)
            page = Declared(target, prepared_at(position[target]) if later else None)
        for decision in loop.decide(url, url, prepared, page):
            if decision.again:
                continue
            verdict = decision.verdict
            if verdict.status == "duplicate":
                pairs.append((verdict.key, verdict.canonical or "", verdict.similarity))
    return algorithm, pairs


def evaluate_configurations(
    manifest_path: str,
    configurations: list[tuple[str, Any]],
    workers: int | None = None,
    limit: int | None = None,
    pairs_path: str | None = None,
    errors_path: str | None = None,
    judged_path: str | None = None,
) -> list[dict[str, Any]]:
    """Score each ``(name, Config)`` on a labelled set; pages are extracted once per extraction setting.
    With ``judged_path`` (:func:`load_judged`), each row also has ``judged``: the score on those pairs."""
    import os
    import time

    manifest = load_manifest(manifest_path)[:limit] if limit else load_manifest(manifest_path)
    judged = load_judged(judged_path) if judged_path else None
    base = os.path.dirname(os.path.abspath(manifest_path))
    extracted: dict[tuple[bool, int, str, bool, str, bool], tuple[list[Any], list[float], list[str | None]]] = {}
    rows = []
    for name, config in configurations:
        setting = (
            config.extract,
            config.min_text_length,
            config.extractor,
            config.extract_fast,
            config.extract_favor,
            config.uses_template_guard,
        )
        if setting not in extracted:
            results = extract_pages(manifest, base, config, workers)
            extracted[setting] = (
                [r.extraction for r in results],
                [r.seconds for r in results],
                [r.declared for r in results],
            )
        texts, extract_secs, declared = extracted[setting]
        started = time.perf_counter()
        algorithm, pairs = decide_pages(manifest, config, texts, declared)
        engine_secs = time.perf_counter() - started
        result = score(manifest, [(a, b) for a, b, _ in pairs])
        if pairs_path:
            with open(pairs_path, "w", encoding="utf-8") as f:
                f.writelines(f"{a}\t{b}\t{s:.4f}\n" for a, b, s in pairs)
        if errors_path:
            with open(errors_path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(record) + "\n" for record in error_report(manifest, pairs))
        row_judged = {}
        if judged is not None:
            js = score_judged(judged, [(a, b) for a, b, _ in pairs])
            row_judged = {
                "judged": {
                    "f1": js.f1,
                    "precision": js.precision,
                    "recall": js.recall,
                    "pairs": js.judged,
                    "positives": js.positives,
                }
            }
        rows.append(
            {
                **row_judged,
                "name": name,
                "params": algorithm.params(),
                "threshold": algorithm.threshold,
                "f1": result.f1,
                "precision": result.precision,
                "recall": result.recall,
                "kind_recall": result.kind_recall,
                "pages": len(manifest),
                "ms_per_page": 1000 * (sum(extract_secs) + engine_secs) / max(len(manifest), 1),
                "engine_ms_per_page": 1000 * engine_secs / max(len(manifest), 1),
            }
        )
    return rows


def lexicon_for_manifest(manifest_path: str, directory: str, limit: int | None = None, config: Any = None) -> str:
    """An I-Match lexicon built from a labelled set's own pages, written into ``directory`` (the caller's to
    remove): their text as ``config``'s pipeline extracts it (the default settings' when None), the text it
    is then applied to."""
    import os

    from ..engine.algorithms.imatch import IMatch
    from ..settings import Config

    pipeline = build_pipeline(config or Config.from_settings({"NEARDUP_ENABLED": True}))
    manifest = load_manifest(manifest_path)[:limit] if limit else load_manifest(manifest_path)
    base = os.path.dirname(os.path.abspath(manifest_path))
    texts = (pipeline.text_of(read_page(os.path.join(base, r["file"])), r["url"]).text for r in manifest)
    terms = IMatch.build_lexicon(texts)
    path = os.path.join(directory, "lexicon.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in terms)
    return path
