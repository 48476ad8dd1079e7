"""CPU of capture's stored-payload step on a float-holding body, against another tree's.

    uv run python -m bench.capture_floats --against /old/checkout [--against /another] [--rounds 6]

A field holding a float is read again from the body exactly (the request's parser made floats of
its numbers: `1e-400` as 0.0, `1.50` as 1.5). Times what the observe route spends on its
`functionArgs` (`prepare_payload` with the service's exact reader, the sanitizing scanner, the
entities of the result), in µs of process CPU per body, for ~24 KB bodies cut from real agent text
(bench.capture's corpus): one with no float (the reference), the same with one float, with 200,
and with one float under two keys the sanitizing makes one (the case still sanitized again).

Each side is measured in a process of its own, by this interpreter, with `app` imported from its
tree; the sides take turns, a process each, round by round, in reversed order every other
round. Each pass parses its values afresh from the bodies (a string through orjson keeps its
UTF-8 cached, so later passes over the same values were too cheap); the best pass of each
process, and the median over rounds, are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.trees import alternated, measure_in

TREE = Path(__file__).resolve().parent.parent
MAX_CHARS = 65_536  # AGMEM_CAPTURE_MAX_FIELD_CHARS's default
MAX_DEPTH = 64
CONTENT_CHARS = 24_000
VALUES = 40  # bodies parsed a pass
PASSES = 7
OBSERVE = '{"sessionId": "s", "functionName": "write_file", "functionArgs": '
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4


def bodies(text: str) -> dict[str, bytes]:
    """The four bodies, on the same ~24 KB of text."""
    start = random.Random(7).randint(0, len(text) - CONTENT_CHARS)
    content = json.dumps(text[start : start + CONTENT_CHARS], ensure_ascii=False)
    scores = ", ".join(f"{0.001 * index + 0.5:.3f}" for index in range(200))
    head = '{"file_path": "src/app.py", "content": ' + content
    args = {
        "no float": head + ', "timeout": 30}',
        "one float": head + ', "timeout": 1.50}',
        "200 floats": head + ', "scores": [' + scores + "]}",
        "merged keys": head + f', "{GITHUB_TOKEN}": "v", "{AWS_KEY}": 1.50}}',
    }
    return {name: (OBSERVE + value + "}").encode() for name, value in args.items()}


def measure(tree: Path) -> None:
    """One side's round, in this process: `app` from `tree`. Prints µs a body, as JSON."""
    sys.path.insert(0, str(tree))
    from app.capture import derive, service
    from app.capture.entities import SANITIZE_SCANNER, extract_entities
    from app.capture.schemas import ObserveIn
    from bench.capture import corpus

    files = [str(Path(str(module.__file__)).resolve()) for module in (derive, service)]
    if not all(Path(file).is_relative_to(tree) for file in files):
        raise SystemExit(f"app was not imported from {tree}: {files}")

    def step(value: Any, body: bytes) -> object:
        payload = derive.prepare_payload(
            value,
            max_chars=MAX_CHARS,
            max_depth=MAX_DEPTH,
            scanner=SANITIZE_SCANNER,
            exact=service._as_sent(body, "functionArgs"),
        )
        return extract_entities(payload.value, scanned=payload.scanned)

    figures: dict[str, float] = {}
    for name, body in bodies(corpus()).items():
        best = float("inf")
        for _ in range(PASSES):
            values = [ObserveIn.model_validate_json(body).function_args for _ in range(VALUES)]
            started = time.process_time()
            for value in values:
                step(value, body)
            best = min(best, time.process_time() - started)
        figures[name] = best / VALUES * 1e6
    print(json.dumps({"us": figures, "files": files}))


def round_of(tree: Path) -> tuple[dict[str, float], list[str]]:
    result = measure_in(__file__, tree)
    return {name: float(us) for name, us in result["us"].items()}, list(result["files"])


def run(against: list[Path], rounds: int) -> None:
    trees = {"this tree": TREE} | {str(tree): tree for tree in against}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for index, name, tree in alternated(trees, rounds):
        figures, files = round_of(tree)
        if not index:
            print(f"{name}: " + ", ".join(files))
        for body, us in figures.items():
            results[name].setdefault(body, []).append(us)
    print("µs of CPU a body (median of rounds; each round's best pass in brackets)")
    for name, by_body in results.items():
        print(name)
        for body, values in by_body.items():
            shown = " ".join(f"{value:.0f}" for value in values)
            print(f"  {body:12} {statistics.median(values):7.1f}  ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--against", type=Path, action="append", help="another tree (required; repeatable)"
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure.resolve())
        return
    if args.against is None:
        parser.error("--against is required")
    run([tree.resolve() for tree in args.against], args.rounds)


if __name__ == "__main__":
    main()
