"""Each algorithm's default threshold, from measurement: F1, precision and recall on a labelled set at a
sweep of thresholds, for every algorithm that takes one; the default is the threshold of best F1 among those
with precision ≥ 0.99 (where one reaches it).

    python3 dev.py bench bench/threshold_defaults.py ../shared/neardup-dev

Pages are extracted once (the product's extraction settings) and decided per configuration in manifest order
with the product's rules (``scrapy-neardup evaluate``'s code). Prints a JSON table and the chosen thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scrapy_neardup.offline.evaluation import evaluate_configurations  # noqa: E402
from scrapy_neardup.settings import Config  # noqa: E402

SWEEPS = {
    "minhash": [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8],
    "bottomk": [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7],
    "spotsigs": [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7],
    "simhash": [0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.97],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    configurations = [
        (
            f"{name}@{t}",
            Config.from_settings({"NEARDUP_ENABLED": True, "NEARDUP_ALGORITHM": name, "NEARDUP_THRESHOLD": t}),
        )
        for name, thresholds in SWEEPS.items()
        for t in thresholds
    ]
    rows = evaluate_configurations(os.path.join(args.dataset, "manifest.jsonl"), configurations, workers=args.workers)
    table: dict[str, list[dict]] = {}
    for row in rows:
        name, _, threshold = row["name"].partition("@")
        table.setdefault(name, []).append(
            {
                "threshold": float(threshold),
                "f1": round(row["f1"], 4),
                "precision": round(row["precision"], 4),
                "recall": round(row["recall"], 4),
            }
        )
    chosen = {}
    for name, points in table.items():
        precise = [p for p in points if p["precision"] >= 0.99] or points
        chosen[name] = max(precise, key=lambda p: (p["f1"], p["threshold"]))
    print(
        json.dumps(
            {"command": " ".join(["bench/threshold_defaults.py", *sys.argv[1:]]), "table": table, "chosen": chosen},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
