#!/usr/bin/env python3
"""Developer entry point that needs nothing but python3: it makes ``.venv``, installs the project, runs.

    python3 dev.py example     # serve the demo site on 127.0.0.1 and crawl it twice with scrapy-neardup
    python3 dev.py test        # the test suite, a pytest worker a core (4 at most); args go to pytest
    python3 dev.py test --fast # the fast layer: every test but the end-to-end crawls (marked slow)
    python3 dev.py test --extended # the long crawl series (marked extended): a step of CI of its own
    python3 dev.py test --spark # the real Spark jobs (marked spark; they need Java 17): a step of CI of its own
    python3 dev.py test --all  # the suite and the extended series, not the Spark jobs
    python3 dev.py lint        # ruff (lint, import order, format) and mypy, as CI runs them before the tests
    python3 dev.py oldest      # the crawl tests on the oldest Scrapy line supported (2.13), in .venv-oldest
    python3 dev.py bench ...   # a benchmark script from bench/, with the peer libraries installed
    python3 dev.py package     # build the sdist and wheel into dist/, install the wheel in a fresh venv, smoke-test it

The virtual environment is reinstalled only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv as venv_module

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(ROOT, ".venv")
PYTHON = os.path.join(VENV, "Scripts" if os.name == "nt" else "bin", "python")
#: The oldest Scrapy the package supports (pyproject: scrapy>=2.13), at the last patch of that line: 2.13.0
#: itself no longer runs with the Twisted that pip installs today.
OLDEST_SCRAPY = "scrapy==2.13.4"
#: The tests that run crawls, for the oldest Scrapy.
OLDEST_TESTS = [
    "tests/crawl/test_crawl.py",
    "tests/crawl/test_canonical.py",
    "tests/unit/test_workers.py",
    "tests/crawl/test_bad_input.py",
]
EXTRAS = {
    "example": "",
    "test": "[test]",
    "lint": "[test]",
    "bench": "[test,bench]",
    "oldest": "[test]",
    "package": "[test]",
}


def ensure_venv(extras: str, venv: str = VENV, pins: tuple[str, ...] = ()) -> None:
    python = os.path.join(venv, "Scripts" if os.name == "nt" else "bin", "python")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        digest = hashlib.sha256(f.read() + extras.encode() + " ".join(pins).encode()).hexdigest()
    stamp = os.path.join(venv, ".installed")
    if os.path.exists(stamp):
        with open(stamp) as f:
            installed = f.read().split()
        if digest in installed:
            return
    else:
        installed = []
    name = os.path.basename(venv)
    if not os.path.exists(python):
        print(f"dev.py: creating {name}", flush=True)
        venv_module.create(venv, with_pip=True)
    print(f"dev.py: installing scrapy-neardup{extras} {' '.join(pins)} into {name}", flush=True)
    subprocess.check_call([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    subprocess.check_call([python, "-m", "pip", "install", "--quiet", "-e", f"{ROOT}{extras}", *pins])
    with open(stamp, "w") as f:
        f.write(" ".join([*installed, digest]))


def package() -> int:
    """Build the sdist and the wheel, install the wheel (not the source tree) with its extras into a fresh
    virtual environment outside the repository, and run .ci/wheel_smoke.py with it: a real crawl and a dedup."""
    import glob
    import shutil
    import tempfile

    dist = os.path.join(ROOT, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    subprocess.check_call([PYTHON, "-m", "pip", "install", "--quiet", "build"])
    subprocess.check_call([PYTHON, "-m", "build", "--outdir", dist, ROOT])
    wheels = glob.glob(os.path.join(dist, "*.whl"))
    sdists = glob.glob(os.path.join(dist, "*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"dev.py package: expected one wheel and one sdist in {dist}, found {wheels + sdists}")
        return 1
    scratch = os.path.join(tempfile.gettempdir(), "neardup-wheel-*")
    before = set(glob.glob(scratch))
    place = tempfile.mkdtemp(prefix="neardup-wheel-venv-")
    try:
        venv_module.create(place, with_pip=True)
        python = os.path.join(place, "Scripts" if os.name == "nt" else "bin", "python")
        subprocess.check_call([python, "-m", "pip", "install", "--quiet", f"{wheels[0]}[redis,warc]"])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        status = subprocess.call([python, os.path.join(ROOT, ".ci", "wheel_smoke.py")], cwd=place, env=env)
    finally:
        shutil.rmtree(place, ignore_errors=True)
    left = set(glob.glob(scratch)) - before
    if left:  # the check cleans up after itself
        print(f"dev.py package: the wheel check left {sorted(left)} behind")
        return 1
    return status


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "oldest":
        oldest = os.path.join(ROOT, ".venv-oldest")
        ensure_venv(EXTRAS[command], oldest, (OLDEST_SCRAPY,))
        python = os.path.join(oldest, "Scripts" if os.name == "nt" else "bin", "python")
        return subprocess.call([python, "-m", "pytest", *OLDEST_TESTS, *rest], cwd=ROOT)
    ensure_venv(EXTRAS[command])
    if command == "package":
        return package()
    if command == "example":
        return subprocess.call([PYTHON, os.path.join(ROOT, "example_project", "run_example.py"), *rest])
    if command == "test":
        layers = {
            "--fast": "not slow",
            "--extended": "extended and not spark",
            "--spark": "spark",
            "--all": "not spark",
        }
        chosen = [arg for arg in rest if arg in layers]
        if len(chosen) > 1:
            print(f"dev.py test: one of {', '.join(layers)} at a time, not {' and '.join(chosen)}")
            return 2
        if chosen:
            rest = [arg for arg in rest if arg not in layers] + ["-m", layers[chosen[0]]]
        elif not any(arg == "-m" or arg.startswith("-m") for arg in rest):
            # The Spark jobs need a JVM that python3 alone does not give, and the extended crawl series would
            # take the suite past ten minutes on two cores: each is a step of CI of its own.
            rest = [*rest, "-m", "not spark and not extended"]
        if not any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in rest):
            # One pytest worker a core, four at most (pytest-xdist): a crawl test mostly waits on its processes,
            # and each starts extraction workers of its own. "-n 0" to run in one process.
            rest = ["-n", str(min(os.cpu_count() or 1, 4)), "--dist", "worksteal", *rest]
        return subprocess.call([PYTHON, "-m", "pytest", *rest], cwd=ROOT)
    if command == "lint":
        sources = ["scrapy_neardup", "tests", "bench", "example_project", "dev.py", ".ci/wheel_smoke.py"]
        return (
            subprocess.call([PYTHON, "-m", "ruff", "check", *sources], cwd=ROOT)
            or subprocess.call([PYTHON, "-m", "ruff", "format", "--check", *sources], cwd=ROOT)
            or subprocess.call([PYTHON, "-m", "mypy"], cwd=ROOT)
        )
    if not rest:
        print("usage: python3 dev.py bench bench/SCRIPT.py [ARGS...]")
        return 2
    return subprocess.call([PYTHON, *rest], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
