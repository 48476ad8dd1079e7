"""CPU of a chunked body's framing alone (`scan_chunks`, app/cli/http1/framing.py) against other
trees': 1 MiB bodies of 1-byte chunks in the plain form the small-chunk run takes and in forms it
does not (an extension, a leading zero, a size line ended by a bare LF, which llhttp refuses but
the framing still reads), and of plain chunks of mixed sizes, small ones between large ones
(`small-large`: 1 and 256 bytes in turn; `mixed-sizes`: 1 to 4,096), in one read, and an eighth
of such a body in reads of 7 bytes.
bench/wire.py times the whole protocol; this one isolates the framing, where rev-wire23 saw the
forms the run does not take 1.3-1.5 times as slow as 5c0a06b's (a failed match after every
chunk). Each side runs in a process of its own with `app` from its tree (`scan_chunks` in
app/cli/wire.py before the http1/ split); the sides alternate round by round, the first each
round in turn; medians are printed, e.g.

    uv run python -m bench.chunk_framing --against /work/notes23/bmain
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.trees import measure_in

TREE = Path(__file__).resolve().parent.parent
BODY = 1024 * 1024
FORMS = {
    "plain": b"1\r\nx\r\n",
    "extension": b"1;a\r\nx\r\n",
    "leading-zero": b"01\r\nx\r\n",
    "bare-lf": b"1\nx\r\n",
    # plain chunks, small ones between large ones (the run's form and the loop's in turn)
    "small-large": b"".join(b"%x\r\n%s\r\n" % (size, b"x" * size) for size in (1, 256)),
    "mixed-sizes": b"".join(
        b"%x\r\n%s\r\n" % (size, b"x" * size) for size in (1, 300, 2, 4096, 17, 255, 256, 5)
    ),
}
# read size and the body's share read: in 7-byte reads an eighth of it (150,000 reads is long)
READS = {"one read": (BODY * 2, 1), "7-byte reads": (7, 8)}
TIMES = 3  # bodies timed a process, after one warming up


def scanner(tree: Path) -> tuple[Callable[..., Any], Any]:
    sys.path.insert(0, str(tree))
    try:
        from app.cli.http1 import framing  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from app.cli import wire as framing  # 5c0a06b: before the split
    if not Path(str(framing.__file__)).resolve().is_relative_to(tree):
        raise SystemExit(f"app was not imported from {tree}")
    # CHUNKS_BEGIN: a tree's own state shape (three fields until wire25, two since)
    return framing.scan_chunks, getattr(framing, "CHUNKS_BEGIN", (0, 0, b""))


def measure(tree: Path) -> dict[str, float]:
    scan, from_start = scanner(tree)  # the state's shape is each tree's own
    figures = {}
    for form_name, form in FORMS.items():
        for read_name, (size, share) in READS.items():
            body = form * (BODY // share // len(form)) + b"0\r\n\r\n"
            reads = [body[at : at + size] for at in range(0, len(body), size)]
            took = []
            for _ in range(1 + TIMES):
                started = time.process_time()
                state = from_start
                for read in reads:
                    state, end = scan(state, read, 0)
                took.append(time.process_time() - started)
                assert end == len(reads[-1]), "the body's end was not found"
            figures[f"{form_name}, {read_name}"] = statistics.median(took[1:]) * 1e3
    return figures


def run(against: list[Path], rounds: int) -> None:
    trees = {"this tree": TREE} | {str(tree): tree for tree in against}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for index in range(rounds):
        order = list(trees.items())
        shift = index % len(order)
        for name, tree in order[shift:] + order[:shift]:
            for case, figure in measure_in(__file__, tree).items():
                results[name].setdefault(case, []).append(figure)
    for case in results["this tree"]:
        ours = statistics.median(results["this tree"][case])
        for name in trees:
            median = statistics.median(results[name][case])
            ratio = "" if name == "this tree" else f"; this tree / it {ours / median:.2f}"
            print(f"{case}: {name}: median {median:.1f} ms CPU a body{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, action="append", help="another tree (once or more)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure.resolve())))
        return
    if args.against is None:
        parser.error("--against is required")
    run([tree.resolve() for tree in args.against], args.rounds)


if __name__ == "__main__":
    main()
