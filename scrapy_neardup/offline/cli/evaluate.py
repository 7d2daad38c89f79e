"""``scrapy-neardup evaluate``, ``lexicon`` and ``tune``: scores on labelled pages, an I-Match lexicon, LSH bands."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from ...assembly import build_pipeline
from ...engine.algorithms import algorithm_names
from .common import AtomicOutput, config_of
from .parser import settings_from_args


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..evaluation import load_manifest, names_no_original
    from ..inputs import InputError

    manifest = load_manifest(args.manifest)
    if not manifest and not args.allow_empty:
        raise InputError(f"{args.manifest}: no page in the manifest; nothing scored (pass --allow-empty to exit 0)")
    if names_no_original(manifest):
        print(
            f"scrapy-neardup: WARNING: no page of {args.manifest} has kind 'original': each cluster's first page "
            "is taken as its original for the recall per kind and the missed pages",
            file=sys.stderr,
        )

    with tempfile.TemporaryDirectory(prefix="neardup-evaluate-") as scratch:  # the lexicon I-Match is given
        return _evaluate(args, scratch)


def _evaluate(args: argparse.Namespace, scratch: str) -> int:
    from ..evaluation import evaluate_configurations, lexicon_for_manifest

    base = settings_from_args(args)
    if args.all:
        configurations = []
        for name in algorithm_names():
            settings = {**base, "NEARDUP_ALGORITHM": name}
            if name != base.get("NEARDUP_ALGORITHM", "minhash"):
                for key in ("NEARDUP_THRESHOLD", "NEARDUP_SHINGLE_SIZE", "NEARDUP_SIMHASH_MAX_DISTANCE"):
                    settings.pop(key, None)  # each algorithm with its own defaults
            if name == "imatch" and "NEARDUP_IMATCH_LEXICON" not in settings:
                # As in Chowdhury et al.'s experiments: the lexicon comes from the collection itself.
                settings["NEARDUP_IMATCH_LEXICON"] = lexicon_for_manifest(args.manifest, scratch, args.limit)
            configurations.append((name, settings))
    else:
        name = base.get("NEARDUP_ALGORITHM", "minhash")
        if name == "imatch" and "NEARDUP_IMATCH_LEXICON" not in base:
            base["NEARDUP_IMATCH_LEXICON"] = lexicon_for_manifest(args.manifest, scratch, args.limit)
        configurations = [(name, base)]
    rows = evaluate_configurations(
        args.manifest,
        [(name, config_of(settings)) for name, settings in configurations],
        workers=args.workers,
        limit=args.limit,
        pairs_path=args.pairs,
        errors_path=args.errors,
        judged_path=args.judged,
    )
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    kinds = sorted({k for row in rows for k in row["kind_recall"]})
    judged = "judged" in rows[0] if rows else False
    header = [
        "configuration",
        "F1",
        "precision",
        "recall",
        *(f"R:{k}" for k in kinds),
        *(["judged F1", "judged P", "judged R"] if judged else []),
        "ms/page",
    ]
    print(" | ".join(header))
    for row in rows:
        cells = [
            row["name"],
            f"{row['f1']:.4f}",
            f"{row['precision']:.4f}",
            f"{row['recall']:.4f}",
            *(f"{row['kind_recall'].get(k, float('nan')):.3f}" for k in kinds),
            *([f"{row['judged'][m]:.4f}" for m in ("f1", "precision", "recall")] if judged else []),
            f"{row['ms_per_page']:.2f}",
        ]
        print(" | ".join(cells))
    return 0


def cmd_lexicon(args: argparse.Namespace) -> int:
    from ...engine.algorithms.imatch import IMatch
    from ...engine.extract import decode_html
    from ..inputs import DocumentReader, check_inputs

    # The text the lexicon is applied to: the crawl's extraction, with the same settings.
    pipeline = build_pipeline(config_of({"NEARDUP_ENABLED": True, "NEARDUP_EXTRACT": not args.no_extract}))

    def texts():
        for doc in DocumentReader(args.inputs):
            if doc.html is None:
                yield doc.text
                continue
            html = decode_html(doc.html, doc.content_type) if isinstance(doc.html, bytes) else doc.html
            yield pipeline.text_of(html, doc.url).text

    check_inputs(args.inputs)
    terms = IMatch.build_lexicon(texts(), low=args.low, high=args.high, min_df=args.min_df)
    output = AtomicOutput(args.output)
    try:
        output.file.writelines(t + "\n" for t in terms)
        output.commit()
    finally:
        output.discard()
    print(json.dumps({"terms": len(terms)}), file=sys.stderr)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ...engine.lsh import candidate_probability, error_areas, optimal_bands

    if not 0 < args.threshold < 1:
        raise SystemExit("scrapy-neardup: --threshold must be between 0 and 1 (exclusive)")
    if not 2 <= args.num_perm <= 1024:
        raise SystemExit("scrapy-neardup: --num-perm must be from 2 to 1024")
    bands, rows = optimal_bands(args.threshold, args.num_perm)
    fp, fn = error_areas(args.threshold, bands, rows)
    print(
        f"threshold {args.threshold}, {args.num_perm} permutations: {bands} bands x {rows} rows "
        f"(S-curve midpoint (1/b)^(1/r) = {(1 / bands) ** (1 / rows):.3f})"
    )
    print(f"false-positive area {fp:.4f}, false-negative area {fn:.4f}")
    print("similarity | P(candidate) | error")
    for s in sorted(
        {
            round(x, 2)
            for x in (
                0.1,
                0.2,
                0.3,
                0.4,
                0.5,
                0.6,
                0.7,
                0.8,
                0.9,
                0.95,
                args.threshold - 0.1,
                args.threshold,
                args.threshold + 0.1,
            )
            if 0 < x < 1
        }
    ):
        p = float(candidate_probability(s, bands, rows))
        kind = "false positive" if s < args.threshold else "false negative"
        err = p if s < args.threshold else 1 - p
        print(f"{s:10.2f} | {p:12.4f} | {err:.4f} {kind}")
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            import numpy as np
        except ImportError:
            raise SystemExit("scrapy-neardup: --plot needs matplotlib: pip install 'scrapy-neardup[plot]'") from None
        xs = np.linspace(0, 1, 401)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, candidate_probability(xs, bands, rows), label=f"LSH {bands}x{rows}")
        ax.step([0, args.threshold, 1], [0, 1, 1], where="post", linestyle="--", label="ideal step")
        ax.set_xlabel("Jaccard similarity")
        ax.set_ylabel("probability of being a candidate")
        ax.set_title(f"threshold {args.threshold}, {args.num_perm} permutations")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot written to {args.plot}")
    return 0
