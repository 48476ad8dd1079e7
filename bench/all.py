"""`make bench`: every benchmark, one after another, each in its own process.

Each prints its own figures (and ratios against its peer or bound); this only runs them in turn
and stops at the first that fails. Pass names to run a subset: `python -m bench.all search sync`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

BENCHMARKS = [
    "capture",
    "sync",
    "relevance",
    "search",
    "worker",
    "compression",
    "memories",
    "proxy",
    "gemini_search",
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", metavar="benchmark", help=f"any of {', '.join(BENCHMARKS)} (all)"
    )
    chosen = parser.parse_args(argv).names or BENCHMARKS
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        print(f"bench.all: unknown benchmark(s) {', '.join(unknown)}; choose from {BENCHMARKS}")
        return 2
    for name in chosen:
        print(f"\n=== bench.{name} ===", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", f"bench.{name}"], check=False)
        print(f"=== bench.{name}: exit {result.returncode} in {time.monotonic() - started:.0f} s")
        if result.returncode != 0:
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
