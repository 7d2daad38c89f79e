#!/usr/bin/env python3
"""Developer entry point that needs nothing but python3: it makes ``.venv``, installs the project, runs.

    python3 dev.py example     # serve the demo site on 127.0.0.1 and crawl it twice with scrapy-neardup
    python3 dev.py test        # the test suite (what CI runs); extra arguments go to pytest
    python3 dev.py lint        # ruff (lint, import order) and mypy, as CI runs them before the tests
    python3 dev.py bench ...   # a benchmark script from bench/, with the peer libraries installed

The virtual environment is reinstalled only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(ROOT, ".venv")
PYTHON = os.path.join(VENV, "Scripts" if os.name == "nt" else "bin", "python")
EXTRAS = {"example": "", "test": "[test]", "lint": "[test]", "bench": "[test,bench]"}


def ensure_venv(extras: str) -> None:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        digest = hashlib.sha256(f.read() + extras.encode()).hexdigest()
    stamp = os.path.join(VENV, ".installed")
    if os.path.exists(stamp):
        with open(stamp) as f:
            installed = f.read().split()
        if digest in installed:
            return
    else:
        installed = []
    if not os.path.exists(PYTHON):
        print("dev.py: creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
    print(f"dev.py: installing scrapy-neardup{extras} into .venv", flush=True)
    subprocess.check_call([PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    subprocess.check_call([PYTHON, "-m", "pip", "install", "--quiet", "-e", f"{ROOT}{extras}"])
    with open(stamp, "w") as f:
        f.write(" ".join([*installed, digest]))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv(EXTRAS[command])
    if command == "example":
        return subprocess.call([PYTHON, os.path.join(ROOT, "example_project", "run_example.py"), *rest])
    if command == "test":
        return subprocess.call([PYTHON, "-m", "pytest", *rest], cwd=ROOT)
    if command == "lint":
        return (subprocess.call([PYTHON, "-m", "ruff", "check", "scrapy_neardup", "tests", "bench", "example_project",
                                 "dev.py"], cwd=ROOT)
                or subprocess.call([PYTHON, "-m", "mypy"], cwd=ROOT))
    if not rest:
        print("usage: python3 dev.py bench bench/SCRIPT.py [ARGS...]")
        return 2
    return subprocess.call([PYTHON, *rest], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
