"""How well the `tokens` list rule tells a random token from an identifier of the same shape
(10 to 15 letters, digits, `_` and `-`, mixing capitals, small letters and digits): the share of
random tokens still redacted and of real code's identifiers kept.

    uv run python -m bench.privacy_token_shape [roots...]

Random tokens are drawn (a fixed seed) from letters and digits, half with `_` and `-` too;
identifiers are the names of that shape in the .py/.js/.ts/.mjs files under the roots (by
default this interpreter's site-packages). Runs against the `app` it imports: with another tree
first on sys.path, that tree's rules.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import site
import string

from app.privacy import sanitize_json

_SHAPE = re.compile(r"(?=[^a-z]*[a-z])(?=[^A-Z]*[A-Z])(?=[^0-9]*[0-9])[A-Za-z0-9_\-]{10,15}")
_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_SOURCES = (".py", ".js", ".ts", ".mjs")


def _random_tokens(count: int) -> list[str]:
    draw = random.Random(24)
    alphabet = string.ascii_letters + string.digits
    tokens: list[str] = []
    while len(tokens) < count:
        chars = alphabet + ("_-" if len(tokens) % 2 else "")
        token = "".join(draw.choice(chars) for _ in range(draw.randint(10, 15)))
        if _SHAPE.fullmatch(token):
            tokens.append(token)
    return tokens


def _identifiers(roots: list[str]) -> list[str]:
    found: set[str] = set()
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith(_SOURCES):
                    with open(os.path.join(folder, name), errors="ignore") as source:
                        found.update(n for n in _NAME.findall(source.read()) if _SHAPE.fullmatch(n))
    return sorted(found)


def _redacted(tokens: list[str]) -> list[str]:
    out = sanitize_json({"tokens": tokens})["tokens"]
    return [token for token, after in zip(tokens, out, strict=True) if after != token]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("roots", nargs="*", default=site.getsitepackages())
    parser.add_argument("--random", type=int, default=100_000)
    args = parser.parse_args()
    tokens = _random_tokens(args.random)
    names = _identifiers(args.roots)
    print(f"random tokens: {len(tokens)}, redacted {len(_redacted(tokens)) / len(tokens):.1%}")
    lost = _redacted(names)
    print(f"identifiers: {len(names)}, kept {1 - len(lost) / max(1, len(names)):.1%}")
    print("redacted identifiers, first 20:", lost[:20])


if __name__ == "__main__":
    main()
