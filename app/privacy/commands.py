"""Passwords given to a client on its command line: `mysql -phunter2`, `docker login -p x`,
`redis-cli -a x`, redacted only when the client is run as a command."""

from __future__ import annotations

import re

from app.privacy.common import (
    _NOT_A_REFERENCE,
    _NOT_REDACTED,
    LINE_BREAK_CHARS,
    REDACTED,
    _Rule,
)

# What may stand between a shell separator (or a quote opening a `sh -c "..."`) and a command
# word: blanks, a prompt, a YAML list item or step key (`- `, `run: `), and a command that runs
# another (`sudo`, `env X=1`, `docker exec -it db`, `kubectl exec pod --`).
_COMMAND_HEAD = re.compile(
    r"[ \t]*(?:[$#>%][ \t]+|-[ \t]+|[\w\-]+:[ \t]+)?"
    r"(?:(?:sudo|doas|env|exec|time|nohup|nice|command|xargs|timeout|watch|docker|podman"
    rf"|kubectl|oc|ssh|nerdctl)[ \t][^{LINE_BREAK_CHARS}]*)?"
)
# Any line break separates commands as `\n` does (`LINE_BREAK_CHARS`: a terminal's `\r`, a
# pasted U+2028): generation 14 read `\n` alone, and kept `ls\u2028mysql -phunter2` in clear.
_SHELL_SEPARATOR = re.compile(rf"[{LINE_BREAK_CHARS}|;&(`\"']")


def _at_command(s: str, start: int) -> bool:
    """Whether `start` in `s` begins a command: what precedes it since the last shell separator
    (within 200 characters) is nothing, a prompt or a command running another."""
    head = s[max(0, start - 200) : start]
    if start > 200 and not _SHELL_SEPARATOR.search(head):
        return False
    return _COMMAND_HEAD.fullmatch(_SHELL_SEPARATOR.split(head)[-1]) is not None


def _command_option(match: re.Match[str]) -> str:
    """A client's password option: redacted when the client is run as a command."""
    if not _at_command(match.string, match.start()):
        return match.group()
    value = match.group("value")
    quote = value[0] if value[0] in ("'", '"') else ""
    return f"{match.group('keep')}{quote}{REDACTED}{quote}"


# A command-line option's value, bare or quoted (`-p'hunter2'`, `-a "s3 cret"`), not a reference.
# A bare one ends where the shell ends a word (`$(mysql -px)`, a `mysql -px` in backticks).
_OPTION_VALUE = (
    rf"(?P<value>'{_NOT_A_REFERENCE}[^'\n]+'|\"{_NOT_A_REFERENCE}[^\"\n]+\""
    rf"|{_NOT_A_REFERENCE}[^\s\"'`;|&()<>]+)"
)
# `user:password` after curl's `-u` or `--user`, bare or quoted (`-u 'me:s3 cret'`), the password
# not a reference (`-u "$USER:$PASS"`); `-u me` alone makes curl prompt for it. A user part
# that `//` follows is a URL's scheme (`-u https://x`, a missing user), no password. In double
# quotes `\"` does not close the value, as the shell reads it (`-u "admin:pa\"ss"`).
_USER_VALUE = (
    rf"(?:'(?P<single_user>[^':\n]*+:)(?!//){_NOT_A_REFERENCE}[^'\n]++'"
    rf"|\"(?P<double_user>(?:[^\"\\:\n]|\\[^\n])*+:)(?!//){_NOT_A_REFERENCE}"
    rf"(?:[^\"\\\n]|\\[^\n])++\""
    rf"|(?P<user>[^\s:\"'`;|&()<>$]*+:)(?!//){_NOT_A_REFERENCE}[^\s\"'`;|&()<>]++)"
)


def _user_option(match: re.Match[str]) -> str:
    """curl's `-u user:password`: the password redacted, the user kept, when curl is run as a
    command."""
    if not _at_command(match.string, match.start()):
        return match.group()
    if match.group("single_user") is not None:
        return f"{match.group('keep')}'{match.group('single_user')}{REDACTED}'"
    if match.group("double_user") is not None:
        return f'{match.group("keep")}"{match.group("double_user")}{REDACTED}"'
    return f"{match.group('keep')}{match.group('user')}{REDACTED}"


# curl's `-u user:password` (`--user`, glued `-uuser:pw`, `--user=`): generation 14 kept it
# in clear, the `://` rule reading a password in a URL's user part alone.
_CURL_USER_RULE: _Rule = (
    ("curl",),
    re.compile(
        r"(?P<keep>curl(?<![^\s|;&(`\"']curl)(?=[ \t])"
        r"(?:[ \t]+(?!curl)[^\s|;&()`]++){0,40}?[ \t]+(?:-u[ \t]*+|--user(?:[ \t]++|=)))"
        + _NOT_REDACTED
        + _USER_VALUE
    ),
    _user_option,
)


# An unquoted value that is not code: a run of characters that stop at whitespace, quotes,
# brackets, separators and `$` (a `${VAR}` reference), holding at least one character that no


COMMAND_RULES: list[_Rule] = [
    # The MySQL clients' password glued to -p (`mysql -u root -phunter2`; a lone -p prompts),
    # `docker login -p x` (podman's and skopeo's alike) and `redis-cli -a x`. The client must be
    # a command word (see _at_command), not a path part (`/var/lib/mysql`) or another tool
    # (`mysql_config`), and the option one of its next words: the look-ahead stops at a shell
    # separator, a newline and the next mention of the client, so that `find /var/lib/mysql
    # -print` keeps its option and 1 MB of "mysql " costs one short look-ahead a word (it cost
    # 291 ms, scanning 200 characters after each).
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<keep>{command}(?<![^\s|;&(`\"']{command}){tail}(?=[ \t])"
                rf"(?:[ \t]+(?!{stop})[^\s|;&()`]++){{0,40}}?[ \t]+{option})"
                + _NOT_REDACTED
                + _OPTION_VALUE
            ),
            _command_option,
        )
        for literal, command, tail, stop, option in (
            ("mysql", "mysql", "[a-z]*", "mysql", "-p"),
            ("mariadb", "mariadb", "(?:-?[a-z]+)?", "mariadb", "-p"),
            *(
                (login, login, "", login.split()[0], r"(?:-p|--password)[ \t]+(?!-)")
                for login in ("docker login", "podman login", "skopeo login")
            ),
            ("redis-cli", "redis-cli", "", "redis-cli", r"(?:-a|--pass)[ \t]+(?!-)"),
        )
    ),
    _CURL_USER_RULE,
]

# A hyperscan gate for curl's rule (app/privacy/engine.py): `curl`, then on its line, outside a
# shell separator, `-u` or `--user` (a non-ASCII blank's bytes among the words'). Without it the
# rule ran on every text naming curl: 50 of the capture benchmark's 1,200 strings, ~0.5 µs a
# value (bench/capture_steps.py).
COMMAND_GATES: dict[re.Pattern[str], str] = {
    _CURL_USER_RULE[1]: r"curl[\t ][^\x0a-\x0d|;&()`]*-(?:u|-user)",
}
