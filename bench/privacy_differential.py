"""The privacy rules' output over fixed corpora, one digest a line, to compare two trees: a
change meant to leave every output as it was (privacy25's narrower `key` list gates) is checked
by running this in both and comparing the files (`cmp`).

    PYTHONPATH=<tree> <python> bench/privacy_differential.py OUT [--files --files-root DIR ...]

Corpora: ../shared/testdata (whole, 2,000-character chunks, lines), 31,500 generated texts of
credentials in JSON, YAML, TOML, INI, shell, URL, log and code forms, 32,000 fuzzed list lines
(tests/test_privacy_gen8_gates.py's generator and more names), 20,000 code lines of lists (alone
and 200 a text); with --files, the .py/.yaml/.yml/.json/.md/.cfg/.toml/.ini files under 2 MB of
each --files-root, required with --files: give both trees the same roots (each row is keyed by
the file's path, so two venvs' files would never line up). Each input's line digests
`redact_secrets`, `redact_secrets_lines`, `sanitize_text` and, for JSON, `sanitize_json` and
`redact_json_text`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import random
import string
from typing import TextIO

from app.privacy import (
    redact_json_text,
    redact_secrets,
    redact_secrets_lines,
    sanitize_json,
    sanitize_text,
)

counts: dict[str, int] = {}
changed: dict[str, int] = {}
_sinks: list[TextIO] = []


def emit(corpus: str, text: str) -> None:
    counts[corpus] = counts.get(corpus, 0) + 1
    results = [redact_secrets(text), redact_secrets_lines(text), sanitize_text(text)]
    if results[0] != text:
        changed[corpus] = changed.get(corpus, 0) + 1
    try:
        value = json.loads(text)
    except ValueError:
        pass
    else:
        results.append(json.dumps(sanitize_json(value), ensure_ascii=False, sort_keys=True))
        results.append(redact_json_text(text))
    h = hashlib.sha256("\x00\x01".join(results).encode("utf-8", "surrogatepass")).hexdigest()
    _sinks[0].write(f"{corpus}\t{counts[corpus]}\t{h[:24]}\n")


# --- 1. ../shared/testdata, whole and in 2,000-character chunks --------------------------------
def _testdata() -> None:
    for path in sorted(pathlib.Path("/work/shared/testdata").rglob("*")):
        if path.is_file():
            data = path.read_text(errors="replace")
            emit("testdata-whole", data)
            for i in range(0, len(data), 2000):
                emit("testdata-chunk", data[i : i + 2000])
            for line in data.splitlines():
                emit("testdata-line", line)


# --- 2. generated secrets in every form (31,500 texts) -----------------------------------------
NAMES = [
    "password",
    "passwd",
    "PASSWORD",
    "db_password",
    "dbPassword",
    "secret",
    "client_secret",
    "SECRET",
    "token",
    "tokens",
    "access_token",
    "authToken",
    "GITHUB_TOKEN",
    "credential",
    "credentials",
    "api_key",
    "apiKey",
    "API_KEY",
    "api-key",
    "apikeys",
    "api_keys",
    "apiKeys",
    "API_KEYS",
    "secret_key",
    "secretKey",
    "SECRET_KEYS",
    "private_key",
    "privateKeys",
    "auth_key",
    "authKeys",
    "signing_key",
    "signingKeys",
    "secret_access_key",
    "passphrase",
    "pwd",
    "pwds",
    "dbPwd",
    "db_pass",
    "DB_PASS",
    "smtpPass",
    "keys",
    "key",
    "Keys",
    "KEYS",
    "primary_keys",
    "foreign_keys",
    "sort_keys",
    "dict_keys",
    "monkeys",
    "hotkeys",
    "token_count",
    "maxTokens",
    "tokenizer",
    "secretName",
    "passwords",
    "Passwords",
    "secrets",
    "unk_token",
    "progressToken",
    "hasPassword",
    "keyé",
    "apié_keys",
    "ключ_keys",
    "OPENAIAPIKEY",
    "APIkeys",
]
WORDS = [
    "correct",
    "horse",
    "battery",
    "staple",
    "casa",
    "parola",
    "verde",
    "sole",
    "nova",
    "senha",
    "aqui",
    "name",
    "email",
    "id",
    "user",
    "admin",
    "read",
    "write",
]


def value(rng: random.Random) -> str:
    kind = rng.randrange(14)
    if kind == 0:
        return "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(6, 40)))
    if kind == 1:
        return "".join(
            rng.choices(string.ascii_letters + string.digits + "!@#$%^&*-_+=", k=rng.randint(6, 20))
        )
    if kind == 2:
        return " ".join(rng.choices(WORDS, k=rng.randint(2, 5)))
    if kind == 3:
        return rng.choice(WORDS)
    if kind == 4:
        return str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if kind == 5:
        return rng.choice(
            [
                "${PASSWORD}",
                "$TOKEN",
                "%KEY%",
                "<your-api-key>",
                "your_api_key",
                "****",
                "xxx",
                "sk-...",
                "env:OPENAI_API_KEY",
                "min:8",
                "-p",
                "--password",
                "true",
                "null",
                "None",
                "",
                "~/src",
                "/home/dev",
            ]
        )
    if kind == 6:
        return rng.choice(["sk-", "ghp_", "AKIA", "xoxb-", "AIza", "glpat-"]) + "".join(
            rng.choices(string.ascii_letters + string.digits, k=rng.randint(16, 40))
        )
    if kind == 7:
        return "".join(
            rng.choices(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                k=rng.randint(10, 15),
            )
        )
    if kind == 8:
        return rng.choice(
            [
                "Uint8Array",
                "OAuth2Client",
                "toBase64String",
                "iPhone15Pro",
                "XMLHttpRequest",
                "x86_64",
                "NUMBER",
                "##ing",
                "deadbeef1234",
            ]
        )
    if kind == 9:
        return "".join(rng.choices("é€ключ日本語" + string.ascii_letters, k=rng.randint(3, 12)))
    if kind == 10:
        return "hunter2"
    if kind == 11:
        return rng.choice(["p@ss!", "Xk9$q2!z", "s3cret!x", "a b", "x", "3"])
    if kind == 12:
        return "".join(rng.choices(string.printable, k=rng.randint(1, 20)))
    return (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE"
        + "A" * rng.randint(10, 80)
        + "\n-----END RSA PRIVATE KEY-----"
    )


def q(v: str, rng: random.Random) -> str:
    return rng.choice(['"', "'", ""]).join(["", v, ""]) if "\n" not in v else json.dumps(v)


def snippet(rng: random.Random) -> str:
    n = rng.choice(NAMES)
    v = value(rng)
    vs = [value(rng) for _ in range(rng.randint(0, 4))]
    form = rng.randrange(22)
    if form == 0:
        return json.dumps({n: v})
    if form == 1:
        return json.dumps({"a": {n: vs, "b": [1, {n: v}]}}, indent=rng.choice([None, 2]))
    if form == 2:
        return f"{n}: {v}"
    if form == 3:
        return f"{rng.choice(['', '  ', '  - '])}{n}: [{', '.join(q(x, rng) for x in vs)}]"
    if form == 4:
        return f"{n}:\n" + "".join(f"  - {x}\n" for x in vs)
    if form == 5:
        return f"{n} = {json.dumps(v)}"
    if form == 6:
        return f"{rng.choice(['', '    '])}{n} = [{', '.join(json.dumps(x) for x in vs)}]"
    if form == 7:
        return (
            f"{n} = [\n"
            + "".join(f"  {json.dumps(x)},{rng.choice(['', '  # note'])}\n" for x in vs)
            + "]"
        )
    if form == 8:
        return f'db = {{ {n} = {json.dumps(v)}, user = "bob" }}'
    if form == 9:
        return f"[{rng.choice(['database', 'client', 'section'])}]\n{n} = {v}\nuser = bob"
    if form == 10:
        return f"{n.upper()}={v}"
    if form == 11:
        return f"export {n}={q(v, rng)}"
    if form == 12:
        return f"mysql -u root -p{v} --{n}={v} db"
    if form == 13:
        return f"https://user:{v}@example.com/path?{n}={v}&x=1"
    if form == 14:
        return f"2026-11-27T15:00:00Z INFO login {n}={v} user=bob"
    if form == 15:
        return f"{n} = [{', '.join(repr(x) for x in vs)}]"
    if form == 16:
        return f"d = {{'{n}': {v!r}, 'other': [{', '.join(repr(x) for x in vs)}]}}"
    if form == 17:
        return f"Authorization: Bearer {v}"
    if form == 18:
        return f"<private>{v}</private> and {n}: {v}"
    if form == 19:
        return f"{n}={v}; user=bob; Server=db"
    if form == 20:
        return f"const {n} = {{ {n}: [{', '.join(json.dumps(x) for x in vs)}] }}"
    return f"{n} {rng.choice([':', '=', ' is '])} {v}"


def _generated() -> None:
    rng = random.Random(25)
    for _ in range(31_500):
        parts = [snippet(rng) for _ in range(rng.randint(1, 8))]
        text = rng.choice(["\n", "\r\n", " ", ", "]).join(parts)
        if rng.random() < 0.5:
            text = (
                rng.choice(["x" * rng.randint(1, 400), "-" * 300 + "\n", "# " + "y" * 280 + "\n"])
                + text
            )
        emit("generated", text)


# --- 3. list-gate fuzz as tests/test_privacy_gen8_gates.py's (its c0023b4 generator) ------------
STEMS = [
    ("assw", ("ord", "d")),
    ("ecret", ("",)),
    ("oken", ("",)),
    ("key", ("",)),
    ("Key", ("",)),
    ("ssphrase", ("",)),
    ("pwd", ("",)),
    ("Pwd", ("",)),
    ("redential", ("",)),
    ("ASSW", ("ORD", "D")),
    ("ECRET", ("",)),
    ("OKEN", ("",)),
    ("KEY", ("",)),
    ("SSPHRASE", ("",)),
    ("PWD", ("",)),
    ("CREDENTIAL", ("",)),
]
ELEMENTS = [
    "'hunter2'",
    '"zQ8pL2mN"',
    "hunter2",
    "x",
    "true",
    "'a b'",
    "p@ss!",
    "3",
    "None",
    "f(x)",
    "'",
    '""',
    "a.b",
    "[1]",
]
SCALAR = "abcxyzABQ0123456789_-.@!$%&*+=/"
BLANKS = ["", " ", "  ", "\t", " \t", "\r"]


def _gatefuzz() -> None:
    for seed in range(8):
        rng = random.Random(1000 + seed)
        for _ in range(4000):
            literal, ends = rng.choice(STEMS)
            head = rng.choice(
                [
                    "",
                    "db",
                    "db_",
                    "p",
                    "P",
                    "my",
                    "  ",
                    "  - ",
                    "api_",
                    "\t",
                    "secret",
                    "AUTH-",
                    "signingé",
                    "ключ",
                    "x.",
                    "PRIVATE__",
                ]
            )
            if literal[0].islower() and literal not in ("key", "pwd"):
                head += rng.choice(
                    ["p", "P", "s", "t", "T", "c", "a", "pa"] if literal != "ecret" else "s"
                )
            name = head + literal + rng.choice(ends) + rng.choice(["", "s", "S"])
            quote = rng.choice(["", "", "'", '"'])
            els = [
                rng.choice(ELEMENTS)
                if rng.random() < 0.5
                else rng.choice(["", "'", '"']).join(
                    ["", "".join(rng.choices(SCALAR, k=rng.randint(1, 12))), ""]
                )
                for _ in range(rng.randint(0, 4))
            ]
            items = "".join(rng.choice(["", " ", ", ", ",", ",\t", " , "]) + e for e in els)
            line = (
                name
                + quote
                + rng.choice(BLANKS)
                + rng.choice([":", "="])
                + rng.choice([*BLANKS, "\n "])
                + "["
                + items
                + rng.choice(BLANKS)
                + "]"
                + rng.choice(["\n", "\n", "\r\n", " \n", "\t# c\n", "", "],\n", " x\n", "]\n"])
            )
            prefix = rng.choice(
                ["x" * rng.randint(1, 400), "-" * 300 + "\n", "# " + "y" * 280 + "\n", ""]
            )
            text = prefix + line
            if rng.random() < 0.5:
                text += rng.choice(["tail line\n", "z" * 30, "  - next: 1\n"])
            emit("gatefuzz", text)


# --- 4. random code lines, one a text and 200 a text -------------------------------------------
CODE_NAMES = [
    "keys",
    "primary_keys",
    "required_keys",
    "tokens",
    "api_keys",
    "secret_keys",
    "KEYS",
    "dictKeys",
    "apiKeys",
    "auth_keys",
    "hotkeys",
    "sort_keys",
    "passwords",
    "secrets",
    "names",
    "items",
    "credentials",
    "pwds",
    "signing_keys",
    "private_keys",
    "i_keys",
]


def _codelines() -> None:
    rng = random.Random(7)
    lines = []
    for _ in range(20_000):
        n = rng.choice(CODE_NAMES)
        els = [
            q(rng.choice(WORDS + ["k1abc", "zQ8pL2mN", "Xk9qLm2Pz7Rt", "p@ss!"]), rng)
            for _ in range(rng.randint(0, 4))
        ]
        sep = rng.choice([" = ", ": ", "=", " := ", '": '])
        lead = rng.choice(["", "    ", "  - ", '"', "self.", "x = "])
        lines.append(
            f"{lead}{n}{sep}[{', '.join(els)}]{rng.choice(['', ',', '  # c', ' + extra'])}"
        )
    for line in lines:
        emit("codeline", line)
    for i in range(0, len(lines), 200):
        emit("codeblock", "\n".join(lines[i : i + 200]) + "\n")


# --- 5. real files: a venv's packages and /usr/share -------------------------------------------
def _files(roots: list[pathlib.Path]) -> None:
    exts = {".py", ".yaml", ".yml", ".json", ".md", ".cfg", ".toml", ".ini"}
    files = sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.suffix in exts and p.is_file() and p.stat().st_size < 2_000_000
    )
    for path in files:
        data = path.read_text(errors="replace")
        r = redact_secrets(data)
        rl = redact_secrets_lines(data)
        counts["files"] = counts.get("files", 0) + 1
        if r != data:
            changed["files"] = changed.get("files", 0) + 1
        h = hashlib.sha256((r + "\x00\x01" + rl).encode("utf-8", "surrogatepass")).hexdigest()
        _sinks[0].write(f"files\t{path}\t{h[:24]}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="file to write the digests to")
    parser.add_argument("--files", action="store_true", help="the real files' corpus too")
    # A fixed folder of an earlier round's clone was named here: once it was gone, --files read
    # /usr/share alone and said nothing (rev2-privacy26).
    parser.add_argument(
        "--files-root",
        action="append",
        type=pathlib.Path,
        help="a folder of the files' corpus (repeatable; required with --files)",
    )
    args = parser.parse_args()
    roots: list[pathlib.Path] = args.files_root or []
    if args.files and not roots:
        parser.error("--files needs --files-root (the same folders for both trees)")
    missing = [str(root) for root in roots if not root.is_dir()]
    if missing:
        parser.error(f"--files-root: no such folder: {', '.join(missing)}")
    with open(args.out, "w") as sink:
        _sinks.append(sink)
        _testdata()
        _generated()
        _gatefuzz()
        _codelines()
        if args.files:
            _files(roots)
    print("counts", counts)
    print("changed", changed)


if __name__ == "__main__":
    main()
