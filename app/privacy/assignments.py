"""Credentials assigned to a credential's name: `.env` and shell lines, quoted values in JSON,
YAML and code (one pair of quotes, triple quotes, a string's prefix), unquoted config values on a
line of their own, Docker config's `auth`."""

from __future__ import annotations

import re

from app.privacy.common import (
    _NOT_REDACTED,
    BLANK,
    LINE_BREAK,
    LINE_BREAK_CHARS,
    REDACTED,
    _Rule,
)
from app.privacy.names import (
    _CREDENTIAL_NAME,
    _CREDENTIAL_VALUE,
    _MASKED_VALUE,
    _NAME_BEFORE,
    _PLAIN_MIN_CHARS,
    _PWD_NAME,
    _plain_word,
    algorithm,
    basic_credentials,
    compiler_pass,
    expected_path,
    passphrase,
    placeholder,
    plain_credential,
    reference,
)


def _assignment(match: re.Match[str]) -> str:
    """`NAME = value` or `"name": "value"`: keep the name, a string's prefix (`r`, `b`, `f`)
    and quotes, redact the value."""
    value = match.group("value")
    groups = match.groupdict()
    quote = (
        groups.get("triple")
        or groups.get("line_triple")
        or (value[0] if value[:1] in ("'", '"') else "")
    )
    prefix = groups.get("prefix") or ""
    lead = groups.get("lead") or ""
    return f"{lead}{match.group('name')}{match.group('sep')}{prefix}{quote}{REDACTED}{quote}"


def _credential_assignment(match: re.Match[str]) -> str:
    """`_assignment` unless the whole name (the part the rule matched and the identifier
    before it) and the value are a reference's, the path the name expects, or a compiler's
    pass, or the value is a plain word that no credential is (`plain_credential`), a phrase
    that no passphrase is, or an f-string of references alone; then the text as it was."""
    start = match.start("name")
    before = _NAME_BEFORE.search(match.string, max(0, start - 100), start)
    # The unquoted rule's name holds the line's indent, a list's `- ` and `export `.
    name = (before.group() if before else "") + match.group("name").split()[-1].strip("\"'")
    groups = match.groupdict()
    if groups.get("triple") is not None:
        # A triple-quoted string's value (`_TRIPLE_QUOTED`): its delimiters and the blanks and
        # newlines around it are no part of it, nor those between the lines of a key's.
        lines = groups["lines3"]
        value = groups["word3"] or groups["phrase3"]
        phrase = groups["phrase3"] is not None
        if lines:
            # Lines of a word of letters each (`Enter\n it`) are prose's, judged as a phrase on
            # one line is; any other's are a key's body, its newlines no part of it.
            words = lines.split()
            phrase = all(_PROSE_LINE.fullmatch(word) for word in words)
            value = " ".join(words) if phrase else "".join(words)
    elif groups.get("line_triple") is not None:
        # In capitals, any other one-line triple-quoted value (`_TRIPLE_LINE`): judged as a
        # phrase, but redacted however short, as the `.env` rule redacts `PASSWORD = "abc"`.
        value = groups["line3"]
        phrase = True
    else:
        value = match.group("value").strip("\"'")
        phrase = groups.get("phrase") is not None
    if _TEMPLATE_PREFIX & set((groups.get("prefix") or "").lower()) and (
        _F_STRING_REFERENCES.fullmatch(value)
    ):
        return match.group()
    if phrase:
        # A value padded with blanks (`"  hunter22  "`, a no-break space's too) is the word
        # inside them.
        value = value.strip()
        if any(char.isspace() for char in value):
            return _assignment(match) if passphrase(name, value) else match.group()
        if len(value) < _PLAIN_MIN_CHARS and groups.get("line_triple") is None:
            return match.group()
    kept = (
        reference(name, value)
        or expected_path(name, value)
        or algorithm(value)
        or compiler_pass(name)
        or _MASKED_VALUE.fullmatch(value) is not None
        or placeholder(name, value)
        or (match.re in _CONFIG_PATTERNS and _plain_word(value) and _plain_kept(match, name, value))
    )
    return match.group() if kept else _assignment(match)


# An f-string's and a template string's prefix letters: their braces hold references.
_TEMPLATE_PREFIX = frozenset("ft")

# A word of prose on a line of its own: a capital at most, then up to 19 small letters, perhaps a
# sentence's punctuation (rev2-privacy26: any run of letters let a key's lines of random
# letters pass as prose, kept in clear).
_PROSE_LINE = re.compile(r"[A-Za-z][a-z]{0,19}+[.,;:!?]?+")

# An f-string of references alone, or with symbols between them (`f"{secret_value}"`,
# `f"{user}:{token}"`): what it holds is a variable's, not a credential written in the code. A
# letter or a digit outside the braces is the code's (`f"sk-{suffix}"`), judged as any value,
# and so is a literal inside them (`f"{'Tr0ub4dor3'}"`): a quote stands only in an index's
# brackets (`{cfg['token']}`), holding a word alone.
_F_STRING_PLAIN = r"[^{}\n\"'\[\]]*+"
_F_STRING_BRACES = (
    rf"\{{{_F_STRING_PLAIN}(?:\[(?:\"\w*+\"|'\w*+'|{_F_STRING_PLAIN})\]{_F_STRING_PLAIN})*+\}}"
)
_F_STRING_REFERENCES = re.compile(rf"[^\w{{}}\n]*+(?:{_F_STRING_BRACES}[^\w{{}}\n]*+)++")


def _plain_kept(match: re.Match[str], name: str, value: str) -> bool:
    """Whether a plain word on a line of its own under a credential's name is no credential:
    besides `plain_credential`'s words, a value assigned as code spaces it (`password =
    getpass`, `self._token = value`, pygments' `token = Error`: a variable or a class), and a
    capitalised word after `:` is a type or a kind (`token: Name`, `secret: Opaque`). `.env`,
    shell and properties files write `name=value`, YAML `name: value` in lower case."""
    sep = match.group("sep")
    code = "=" in sep and sep[:1].isspace() and sep[-1:].isspace()
    # A capitalised word after `:` is a type, a column's kind or prose's verdict under a
    # password's name too (`password: Varchar`, `Password: Strong`): only an INI section above
    # makes it a value (generation 6 redacted it under a password's name, and so rewrote code).
    typed = ":" in sep and value[:1].isupper()
    if (code or typed) and not _ini_section_above(match.string, match.start("name")):
        return True
    return not plain_credential(name, value)


# An INI file's section header (`[db]`, `[remote "origin"]`, `[tool.x]`: a name of letters, `_`,
# `.` and `-`, and a quoted subsection; pytest-xdist's `[gw0]`, a status's `[ OK ]`, `[a/b]` are
# none), and the lines an INI file holds between it and a key: other keys, comments, blank
# lines. A line of code (a call, a `def`, a list) between them ends the search.
_INI_HEADER = re.compile(r"[ \t]*\[[A-Za-z_][A-Za-z_.\-]*(?:[ \t]+\"[^\"\n]*\")?\][ \t]*\r?\n")
_INI_LINES = re.compile(r"(?:[ \t]*(?:[#;][^\n]*|[\w.\-]+[ \t]*[:=][^\n(){}\[\]]*)?\r?\n)*+")
# How far above a key its section is looked for: a bound, so that each of a megabyte's keys
# costs a few lines' search, not the text's.
_INI_WINDOW = 2000


def _ini_section_above(text: str, start: int) -> bool:
    """Whether the line at `start` is in an INI file's section: a header above it with only an
    INI file's lines between (`_INI_LINES`: no `[` among them), within `_INI_WINDOW` characters.
    Code spaces `=` as INI does (`password = getpass`), but holds no section header."""
    low = max(0, start - _INI_WINDOW)
    bracket = text.rfind("[", low, start)
    if bracket < 0:
        return False
    # The header's line start is looked for within the window too: unbounded, text without a
    # `\n` (lines broken by U+2028 or `\r`) was read back to its start for every key.
    newline = text.rfind("\n", max(0, low - 1), bracket)
    if newline < 0 and low > 0:
        return False
    line = newline + 1
    header = _INI_HEADER.match(text, line)
    if header is None:
        return False
    between = _INI_LINES.match(text, header.end(), start)
    return between is not None and between.end() == start


def _keyed(word: str) -> tuple[str, ...]:
    """The literals of `word` and a `Key` after it, as names spell them (`privateKey`,
    `signing_key`, `AUTH-KEY`)."""
    keys = ("KEY",) if word.isupper() else ("Key", "key")
    return tuple(f"{word}{sep}{key}" for sep in ("", "_", "-") for key in keys)


# The names whose quoted values the assignment rules redact: (the pattern's start, which begins
# with a literal so that the regex engine skips ahead fast, with a lookbehind for what comes
# before it; the literals one of which every match holds; the name as a hyperscan gate spells
# it, lookarounds dropped). `pass` and `pwd` as in _CREDENTIAL_NAME and _PWD_NAME.
QUOTED_NAMES: list[tuple[str, tuple[str, ...], str]] = [
    ("ecret(?<=[sS]ecret)(?:[_\\-]?[kK]ey)?", ("ecret",), "[sS]ecret(?:[_\\-]?[kK]ey)?"),
    ("ECRET(?<=SECRET)(?:[_\\-]?KEY)?", ("ECRET",), "SECRET(?:[_\\-]?KEY)?"),
    ("oken(?<=[tT]oken)", ("oken",), "[tT]oken"),
    ("OKEN(?<=TOKEN)", ("OKEN",), "TOKEN"),
    ("assw(?<=[pP]assw)(?:or)?d", ("assw",), "[pP]assw(?:or)?d"),
    ("ASSW(?<=PASSW)(?:OR)?D", ("ASSW",), "PASSW(?:OR)?D"),
    ("pi(?<=[aA]pi)[_\\-]?[kK]ey", ("key", "Key"), "[aA]pi[_\\-]?[kK]ey"),
    ("PI(?<=API)[_\\-]?(?:KEY|[kK]ey)", ("KEY", "Key", "key"), "API[_\\-]?(?:KEY|[kK]ey)"),
    ("rivate(?<=[pP]rivate)[_\\-]?[kK]ey", _keyed("rivate"), "[pP]rivate[_\\-]?[kK]ey"),
    ("RIVATE(?<=PRIVATE)[_\\-]?KEY", _keyed("RIVATE"), "PRIVATE[_\\-]?KEY"),
    ("igning(?<=[sS]igning)[_\\-]?[kK]ey", _keyed("igning"), "[sS]igning[_\\-]?[kK]ey"),
    ("IGNING(?<=SIGNING)[_\\-]?KEY", _keyed("IGNING"), "SIGNING[_\\-]?KEY"),
    ("uth(?<=[aA]uth)[_\\-]?[kK]ey", _keyed("uth"), "[aA]uth[_\\-]?[kK]ey"),
    ("UTH(?<=AUTH)[_\\-]?KEY", _keyed("UTH"), "AUTH[_\\-]?KEY"),
    ("assphrase(?<=[pP]assphrase)", ("assphrase",), "[pP]assphrase"),
    ("ASSPHRASE(?<=PASSPHRASE)", ("ASSPHRASE",), "PASSPHRASE"),
    ("_(?:[pP]ass|PASS)", ("_pass", "_Pass", "_PASS"), "_(?:[pP]ass|PASS)"),
    ("-(?:[pP]ass|PASS)", ("-pass", "-Pass", "-PASS"), "-(?:[pP]ass|PASS)"),
    ("Pass(?<=[a-z]Pass)", ("Pass",), "[a-z]Pass"),
    ("pwd(?<![A-Za-z0-9]pwd)", ("pwd",), "pwd"),
    ("Pwd(?<![A-Z0-9]Pwd)", ("Pwd",), "Pwd"),
    ("PWD(?<![A-Za-z0-9]PWD)", ("PWD",), "PWD"),
]

# Unquoted values of credential-named keys on a line of their own: YAML, TOML, INI, .env,
# `export`, properties (`password: hunter2`, `api_key = abc123`, `  - TOKEN=x1`). The value must
# be the line's last word and not one an identifier could be (see _CREDENTIAL_VALUE), so that
# `password: str`, `token: Optional[str] = None`, `password = get_password()` or `secret:
# SecretStr` keep theirs; digits alone are a count (`max_token: 4096`) or a version (`token:
# v1.2.3`). A word of letters alone (`password: swordfish`) is judged by `plain_credential`:
# users' passwords are often plain words, and so are documentation's placeholders.
# Up to its line's end, any line break ending it (`LINE_BREAK_CHARS`).
# The indent, a list's `- ` and `export ` may hold any Unicode blank (`\u00a0password: x` from a
# rich-text paste; generation 14 read spaces and tabs alone there, and kept the value in clear).
_CONFIG_LINE = (
    rf"(?P<name>{BLANK}*(?:-{BLANK}+)?(?:export{BLANK}+)?"
    rf"(?:[\w.\-]*?{_CREDENTIAL_NAME}|(?:[\w.\-]*?[_.\-])?{_PWD_NAME}))"
    rf"(?P<sep>{BLANK}*[:=]{BLANK}*)"
    + _NOT_REDACTED
    + r"(?![=:])(?![-+]?v?\d+(?:\.\d+)?\b)(?!(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*\b)(?P<value>"
    + _CREDENTIAL_VALUE
    # A value in `<…>` (`<hunter2>`, `<Hunter Two>`) as JSON judges it (`known_value`).
    + r"|[A-Za-z]++|<(?![%$\{])[^<>\n]{1,100}+>)(?<!:)"
    + rf"(?={BLANK}*(?:{BLANK}#[^{LINE_BREAK_CHARS}]*)?(?:[{LINE_BREAK_CHARS}]|\Z))"
)
_CONFIG_PATTERN = re.compile("^" + _CONFIG_LINE, re.MULTILINE)
# A line that another line break than `\n` starts (`\u2028password: hunter2x9`): the break is
# matched (`lead`, kept), so that the pattern starts with a character set, which the regex engine
# skips to as fast as to a literal. A lookbehind for any break at every position in place of
# `^` tripled the rule's cost on the capture benchmark's values (4.9 to 15.4 µs a value).
_CONFIG_AFTER_BREAK = re.compile(r"(?P<lead>[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029])" + _CONFIG_LINE)
_CONFIG_PATTERNS = (_CONFIG_PATTERN, _CONFIG_AFTER_BREAK)
_CONFIG_LITERALS = (
    *("assw", "ASSW", "ecret", "ECRET", "oken", "OKEN", "key", "Key", "KEY"),
    *("ssphrase", "SSPHRASE", "_pass", "-pass", "_PASS", "-PASS", "Pass"),
    *("pwd", "Pwd", "PWD"),
)

# A TOML (or Python) triple-quoted string of one line, `"""hunter2x"""` or `'''hunter2x'''`, or
# that line alone between the delimiters' lines (TOML trims the newline after the opening one):
# judged as the value in one pair of quotes is, a word (`word3`) or a phrase (`phrase3`, by
# `passphrase`), the blanks around it aside (`"""  hunter2x  """`). A word may hold a quote
# that does not close it (`"""ab"cd"""`, privacy26: generation 12 kept it in clear); a phrase
# holds none, so that it cannot run past its closing delimiter. A text of several lines is a
# key's (`lines3`: a word on each line, base64's as a private key's body) or a help text or a
# docstring, which is kept; a PEM key is KEY_RULES'. A key's first line may follow the opening
# delimiter, or a `\` continuing it (blanks before the `\` too: generation 13 kept
# `"""  \` and the key's lines after it in clear); blank lines may stand before, among and after
# its lines.
# Every blank and newline run is possessive: the runs on either side of an optional newline
# could split the same blanks, and an unclosed `"""` before a megabyte of blanks backtracked
# through every split (rev-privacy26: 800 blanks took over a minute).
_TRIPLE_CHAR = r"(?:[^\"'\s]|(?!(?P=triple))[\"'])"
# A key's line, its characters read a run at a time: one character a step (`_TRIPLE_CHAR++`),
# an unclosed `"""` before a megabyte of a key's lines cost 30-60 ms (rev-privacy26).
_TRIPLE_WORD = r"(?:[^\"'\s]++|(?!(?P=triple))[\"'])++"
# Whether the delimiter closes further on, looked for before a key's lines are read line by
# line (a step of the regex engine each): an unclosed `"""` before a megabyte of a key's lines
# took 30-60 ms (12-35 ms with the runs above alone; 0.4-3 ms before generation 13 read a key's
# lines). A run of anything but one quote character is the engine's fastest loop (~0.7 ms a
# megabyte, a class of two characters ~3.6 ms), so each delimiter has its own branch.
_TRIPLE_CLOSES = (
    r"(?=(?<=\"\"\")[^\"]*+(?:\"(?!\"\")[^\"]*+)*+\"\"\""
    r"|(?<=''')[^']*+(?:'(?!'')[^']*+)*+''')"
)
# Between a key's lines: line breaks (`LINE_BREAK`: `\n`, `\r\n`, `\r` alone, U+2028...), blank
# lines among them, and the blanks of an indent; read once (possessive), as a word's characters
# are none of them.
_TRIPLE_GAP = rf"(?:[ \t]*+{LINE_BREAK})++[ \t]*+"
_TRIPLE_QUOTED = (
    rf"(?P<triple>\"\"\"|''')(?:[ \t]*+{LINE_BREAK}?+[ \t]*+"
    rf"(?:(?P<word3>{_TRIPLE_CHAR}{{4,}}+)|(?P<phrase3>[^\"'{LINE_BREAK_CHARS}:=]{{4,100}}+))"
    rf"[ \t]*+{LINE_BREAK}?+[ \t]*+"
    rf"|{_TRIPLE_CLOSES}(?P<lines3>(?:[ \t]*+\\?+{_TRIPLE_GAP})?+{_TRIPLE_WORD}"
    rf"(?:{_TRIPLE_GAP}{_TRIPLE_WORD})++"
    rf"(?:[ \t]*+{LINE_BREAK})*+[ \t]*+))"
    r"(?P=triple)"
)
# In capitals (the `.env` rule, which redacts a value of any length in one pair of quotes), any
# other triple-quoted value of one line (`PASSWORD = '''x'y'''`, `"""abc"""`): generation 12 took
# its delimiter's `""` for an empty value, and kept the password after it.
_TRIPLE_LINE = (
    r"(?P<line_triple>\"\"\"|''')"
    r"(?P<line3>(?:(?!(?P=line_triple))[^\n]){1,100}+)(?P=line_triple)"
)
# A Python string's prefix before its quote (`r"…"`, `b'…'`, `f"""…"""`, `rb"…"`), kept
# as the quotes are; generation 12 kept the value after it in clear (in capitals the `.env`
# rule redacted the prefix alone, `PASSWORD = [REDACTED]"s3cr3t"`). Python 3.14's template
# strings (`t"…"`, `tr"…"`) too, read as f-strings are (generation 13 kept them in clear).
_STRING_PREFIX = (
    r"(?P<prefix>(?:[bB][rR]|[rR][bB]|[fF][rR]|[rR][fF]|[tT][rR]|[rR][tT]|[rRbBuUfFtT])"
    r"(?=[\"']))?"
)

ASSIGNMENT_RULES: list[_Rule] = [
    # .env / shell style: API_KEY=..., DB_PASSWORD="...", export GITHUB_TOKEN=...
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<name>{word})(?P<sep>\s*=(?!=)\s*)"
                + _NOT_REDACTED
                # An unquoted value ends at a JSON-escaped newline too (`\n` in a transcript's
                # raw line), not swallowing the lines after it.
                # A value in `<…>` is one, blanks and all (`<Hunter Two>`), as JSON's is; a
                # template's tag (`<%= x %>`, `<${x}>`) is none.
                # A triple-quoted string first: its `""` would be an empty value, and is none
                # before a third quote (an unclosed `PASSWORD = """` is kept whole).
                + _STRING_PREFIX
                + rf"(?P<value>{_TRIPLE_QUOTED}|{_TRIPLE_LINE}"
                # In double quotes, as shell and `.env` read them, `\"` does not close the value
                # (`PASSWORD="ab\"cd1234"`). Nor does `\'` in single quotes: dotenv readers
                # take it as an escape, and in a shell the value runs on past it anyway
                # (`'ab\'cd1234'` is `ab\cd1234` and an open quote); generation 13 redacted
                # `ab\` and kept the rest in clear. Only a `\'` that blanks and then a shell's
                # operator (`;`, `&`, `|`) or the line's end follow closes the value, as a shell
                # reads it: `PASSWORD='abc\' ; echo 'hi'` runs `echo`, which generation 14
                # redacted up to the next quote. A blank or a bracket alone does not: a dotenv
                # reader takes `'p@ss\' w0rd'` whole, and so does this rule.
                + r"|\"(?:[^\"\n\\]|\\[^\n])++\"|\"[^\"\n]++\"|\"\"(?!\")"
                + rf"|'(?:[^'\n\\]|\\[^'\n]|\\'(?!{BLANK}*+(?:[;&|{LINE_BREAK_CHARS}]|\Z)))++"
                + r"\\?+'|'[^'\n]++'|''(?!')"
                + r"|<(?![%$\{])[^<>\n]{1,100}+>(?![^\s\"'#\\])"
                + r"|(?:[^\s\"'#\\]|\\(?![nr]))+)"
            ),
            _credential_assignment,
        )
        for word, literal in (
            ("KEY", "KEY"),
            ("SECRET", "SECRET"),
            ("TOKEN", "TOKEN"),
            ("PASSWORD", "PASSWORD"),
            ("PASSWD", "PASSWD"),
            ("CREDENTIALS?", "CREDENTIAL"),
            ("AUTH", "AUTH"),
            ("PASSPHRASE", "PASSPHRASE"),
            # DB_PASS, SMTP_PASS; up to three digits alone are a count (`DEFAULT_LAST_PASS = 2`,
            # in mypy), not a password.
            (r"_PASS(?!\s*=\s*[-+]?\d{1,3}(?![^\s\"'#]))", "_PASS"),
            # MYSQL_PWD; a lone PWD is a working directory, and so is a path under a
            # `*_PWD` (`BUILD_PWD=/home/u/src`; see `expected_path`).
            (r"_PWD", "_PWD"),
        )
    ),
    # Quoted values of credential-named keys in JSON, YAML or code: "password": "hunter2".
    *(
        (
            literals,
            re.compile(
                rf"(?P<name>{stem}[\"']?)(?P<sep>\s*[:=]\s*)"
                + _NOT_REDACTED
                # A value with a blank is judged by `passphrase`; it holds no quote, `:` or `=`,
                # so that no credential's assignment it would hide from this rule is inside it,
                # and 4 characters or more, as the hyperscan gate's quoted value (engine.py).
                + _STRING_PREFIX
                # An escaped quote does not close the value (`"ab\"cd1234"`); where the escapes
                # leave no closing quote (`"hunter2\"`), the quote ends the value as before.
                + r"(?P<value>\"(?:[^\"\s\\]|\\\S){4,}+\"|'(?:[^'\s\\]|\\\S){4,}+'"
                + r"|\"[^\"\s]{4,}\"|'[^'\s]{4,}'"
                + r"|(?P<phrase>\"[^\"'\n:=]{4,100}+\"|'[^'\"\n:=]{4,100}+')"
                + rf"|{_TRIPLE_QUOTED})"
            ),
            _credential_assignment,
        )
        for stem, literals, _gate in QUOTED_NAMES
    ),
    # A Docker config's registry credentials: "auth": "<base64 of user:password>" (only that:
    # "auth" is also a topic, `{"auth": "refresh tokens rotate"}` in a kv memory).
    (
        ('"auth"',),
        re.compile(r'(?P<name>"auth")(?P<sep>\s*:\s*)(?P<value>"[A-Za-z0-9+/=]{8,}")'),
        lambda match: (
            _assignment(match) if basic_credentials(match.group("value")[1:-1]) else match.group()
        ),
    ),
    # Unquoted values of credential-named keys on a line of their own (see _CONFIG_PATTERN), and
    # on one another line break than `\n` starts (the scan's literals are ASCII: the name's).
    *((_CONFIG_LITERALS, pattern, _credential_assignment) for pattern in _CONFIG_PATTERNS),
]
