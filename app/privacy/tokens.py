"""Credentials recognised by their own shape, under any name: provider keys and tokens, AWS keys,
JWTs, Authorization and Bearer headers, passwords in URLs."""

from __future__ import annotations

import base64
import binascii
import re

from app.privacy.common import _NOT_A_REFERENCE, _NOT_REDACTED, REDACTED, _keep_group, _Rule

# A PEM private key's header, as its base64 decodes (a certificate's is kept: it is public).
_PRIVATE_KEY_HEADER = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
# Enough of a base64 run to hold the longest header (`-----BEGIN ENCRYPTED PRIVATE KEY-----`).
_ENCODED_HEADER_CHARS = 80
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]*")


def _encoded_private_key(match: re.Match[str]) -> str:
    """A base64 run starting as `-----BEGIN ` does: redacted when it decodes to a private
    key's header (kubeconfig's `client-key-data`, a Kubernetes Secret's `tls.key`)."""
    run = _BASE64_RUN.match(match.group())
    head = run.group()[:_ENCODED_HEADER_CHARS] if run else ""
    try:
        decoded = base64.b64decode(head[: len(head) // 4 * 4])
    except (ValueError, binascii.Error):
        return match.group()
    return REDACTED if _PRIVATE_KEY_HEADER.match(decoded) else match.group()


KEY_RULES: list[_Rule] = [
    (
        ("-----BEGIN ",),
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # The same key in base64, as kubeconfig's `client-key-data` and a Secret's `tls.key` hold it
    # (generation 14 kept it in clear under any name): the run, and the lines that a wrapped
    # encoding (`base64`'s 76 characters a line) continues it on, each after a long one and
    # base64 to its end (`tls.crt: x` on the next line is YAML's).
    (
        ("LS0tLS1CRUdJTi",),
        re.compile(
            r"LS0tLS1CRUdJTi(?<![A-Za-z0-9+/]LS0tLS1CRUdJTi)[A-Za-z0-9+/]*+={0,2}+"
            r"(?:(?<=[A-Za-z0-9+/=]{60})\r?\n[ \t]*+[A-Za-z0-9+/]++={0,2}+(?=\s|[\"',]|\Z))*+"
        ),
        _encoded_private_key,
    ),
    # Google API keys (Gemini, Maps, Firebase).
    (("AIza",), re.compile(r"AIza[0-9A-Za-z_\-]{35}"), REDACTED),
    # Google OAuth access tokens: `ya29.` and a base64url body (the name-based rules read the
    # dot as an attribute path's).
    (("ya29.",), re.compile(r"ya29(?<![\w.]ya29)\.[0-9A-Za-z_\-]{20,}"), REDACTED),
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-api03-...
    (("sk-",), re.compile(r"sk-(?<![\w\-]sk-)[A-Za-z0-9_\-]{20,}"), REDACTED),
    # GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ and fine-grained github_pat_.
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"gh(?<!\wgh)[pousr]_[A-Za-z0-9]{30,}"),
        REDACTED,
    ),
    (("github_pat_",), re.compile(r"github_pat_\w{22,}"), REDACTED),
    # GitLab personal access tokens.
    (("glpat-",), re.compile(r"glpat-[A-Za-z0-9_\-]{20,}"), REDACTED),
    # Hugging Face access tokens (hf_ and 34 letters and digits; `hf_hub_download` has no run
    # of 30 without an underscore).
    (("hf_",), re.compile(r"hf_(?<!\whf_)[A-Za-z0-9]{30,}"), REDACTED),
    # npm access tokens: `npm_` and 36 letters and digits (`npm config set
    # //registry.npmjs.org/:_authToken npm_…` gives it no `=` for the `.npmrc` rule to read).
    (("npm_",), re.compile(r"npm_(?<!\wnpm_)[A-Za-z0-9]{36}(?![A-Za-z0-9_])"), REDACTED),
    # PyPI upload tokens: a macaroon whose base64 starts "AgE" (pypi.org's and test.pypi's).
    (("pypi-Ag",), re.compile(r"pypi-AgE[A-Za-z0-9_\-]{50,}"), REDACTED),
]

AWS_RULES: list[_Rule] = [
    # AWS access key ids.
    (("AKIA", "ASIA"), re.compile(r"A(?<!\wA)[KS]IA[0-9A-Z]{16}(?![0-9A-Za-z])"), REDACTED),
    # AWS secret access keys (40 characters of base64) after their name: the id alone was
    # redacted, and `aws iam create-access-key`'s JSON or ~/.aws/credentials kept the secret.
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<={word})[\"']?\s*[:=]\s*[\"']?)"
                + _NOT_REDACTED
                + r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
            ),
            _keep_group("keep"),
        )
        for stem, word in (
            ("ecretAccessKey", "[sS]ecretAccessKey"),
            ("ecret_access_key", "[sS]ecret_access_key"),
            ("ECRET_ACCESS_KEY", "SECRET_ACCESS_KEY"),
            ("ecret-access-key", "[sS]ecret-access-key"),
        )
    ),
]

SERVICE_RULES: list[_Rule] = [
    # Slack tokens.
    (("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"), REDACTED),
    # Stripe secret and restricted keys: the kind (sk_live_) stays readable.
    *(
        (
            (kind,),
            re.compile(rf"(?P<keep>{kind}(?<=\b[sr]{kind}))[A-Za-z0-9]{{16,}}"),
            _keep_group("keep"),
        )
        for kind in ("k_live_", "k_test_")
    ),
    # JSON Web Tokens.
    (
        ("eyJ",),
        re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        REDACTED,
    ),
]

# The API key and auth token headers' names: (a literal the pattern starts with, the name's
# start it checks behind it, the rest, the literals every match holds).
_API_HEADERS = [
    ("pi-", "[aA]pi-", "[kK]ey", ("pi-key", "pi-Key")),
    ("PI-", "API-", "(?:KEY|Key)", ("PI-Key", "PI-KEY")),
    ("uth-", "[aA]uth-", "[tT]oken", ("uth-token", "uth-Token")),
    ("UTH-", "AUTH-", "(?:TOKEN|Token)", ("UTH-Token", "UTH-TOKEN")),
    # GitLab's `PRIVATE-TOKEN: glpat-…` and an older token of 20 characters with no prefix
    # (`curl -H "PRIVATE-TOKEN: …"`, as GitLab's API documentation writes it).
    ("rivate-", "[pP]rivate-", "[tT]oken", ("rivate-token", "rivate-Token")),
    ("RIVATE-", "PRIVATE-", "(?:TOKEN|Token)", ("RIVATE-Token", "RIVATE-TOKEN")),
]
_HEADER_VALUE = r"(?=[^\s\"',;<>]*?[^A-Za-z_.\-\s\"',;<>])[^\s\"',;<>]{8,}"
# An API key or auth token header (`curl -H "X-API-Key: ..."`, a request dump), anywhere
# in a line: the assignment rules see a name only at a line's start or before a quoted value.
# Only these headers' names (`X-Goog-Api-Key`, `Api-Key`, `X-Auth-Token`), so that YAML's
# `cache-key: ...` keeps its value; one of 8 characters or more, as for Authorization, so
# that prose naming the header (`the X-API-Key: header`) keeps its next word. As under the
# config rule's names, a value of letters alone, or words joined by `_`, `-` or `.`, is
# documentation (`X-API-Key: required`, `YOUR_API_KEY`, `your-api-key-here`, `ApiKeyAuth`):
# a key holds a digit or another symbol.
# Each header word is a rule of its own that starts with a literal, so that the regex engine
# skips ahead to it (one pattern starting `(?:[A-Za-z]+-){0,3}` was tried at every position:
# 180 ms over a megabyte holding the name once); the hyperscan gates (API_HEADER_GATES) skip
# a text where no value follows the name. What may come before the word is any `X-`,
# `X-Goog-` or nothing after a non-word character.
_API_HEADER_RULES: list[_Rule] = [
    (
        literals,
        re.compile(
            rf"(?P<keep>{stem}(?<![\w]{word})(?<={word}){end}[ \t]*+:[ \t]*+)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            + _HEADER_VALUE
        ),
        _keep_group("keep"),
    )
    for stem, word, end, literals in _API_HEADERS
]
# Hyperscan gates for those rules (app/privacy/engine.py): the name, `:` and 8 bytes of a value,
# so that a text naming a header without a value after it (a megabyte of spaces) skips them.
API_HEADER_GATES: dict[re.Pattern[str], str] = {
    pattern: rf"{word}{end}[\t ]*:[\t ]*[^\x09-\x0d\x20\"',;<>]{{8}}"
    for (_, pattern, _), (_, word, end, _) in zip(_API_HEADER_RULES, _API_HEADERS, strict=True)
}

HEADER_RULES: list[_Rule] = [
    # Authorization headers: "Authorization: Bearer x", "Authorization: Basic x", "token x".
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<={word})[\"']?\s*[:=]\s*[\"']?"
                r"(?:(?i:bearer|basic|token|bot)\s+)?)" + _NOT_REDACTED + r"[^\s\"',;<>]{8,}"
            ),
            _keep_group("keep"),
        )
        for stem, word in (("uthorization", "[aA]uthorization"), ("UTHORIZATION", "AUTHORIZATION"))
    ),
    *_API_HEADER_RULES,
    # A bare bearer credential anywhere else (curl -H, logs).
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<=\b{word})\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/=\-]{8,}"
            ),
            _keep_group("keep"),
        )
        for stem, word in (("earer", "[bB]earer"), ("EARER", "BEARER"))
    ),
    # Passwords in URLs: scheme://user:password@host keeps the user and host.
    (
        ("://",),
        re.compile(r"(?P<keep>://[^\s:/@\"'<>]*:)" + _NOT_REDACTED + r"[^\s@/\"'<>]+(?=@)"),
        _keep_group("keep"),
    ),
]
