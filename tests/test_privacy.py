"""Privacy and hygiene functions: cleaning, stripping, redaction, capping."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.privacy import (
    REDACTED,
    RULES_GENERATION,
    RULES_VERSION,
    NestingTooDeep,
    cap_text,
    clean_text,
    json_depth,
    redact_json,
    redact_json_text,
    redact_secrets,
    redact_secrets_lines,
    sanitize_json,
    sanitize_text,
    strip_private,
    strip_private_lines,
)
from app.privacy import engine as privacy_engine
from app.privacy import lists as privacy_lists
from app.privacy import names as privacy_names
from app.privacy.engine import _RULE_GATES, _RULES, _SCANNER
from app.textscan import SHORT_TEXT

TESTDATA = Path("/work/shared/testdata")
if not TESTDATA.exists():
    TESTDATA = Path(__file__).resolve().parents[2] / "shared" / "testdata"
REAL_FILES = sorted(p for p in TESTDATA.rglob("*") if p.is_file() and p.suffix != ".md") + sorted(
    TESTDATA.rglob("*.md")
)


# --- clean_text ---


def test_clean_text_removes_nul() -> None:
    assert clean_text("a\x00b\x00") == "ab"


def test_clean_text_replaces_lone_surrogates_and_keeps_pairs() -> None:
    decoded = json.loads('"x\\ud800y \\udfff \\ud83d\\ude00"')
    cleaned = clean_text(decoded)
    assert cleaned == "x\ufffdy \ufffd \U0001f600"
    cleaned.encode("utf-8")


def test_clean_text_leaves_clean_text_identical() -> None:
    text = "héllo wörld ✅ — fine"
    assert clean_text(text) is text


# --- strip_private ---


def test_strip_private_removes_spans_case_insensitive_and_multiline() -> None:
    text = "keep <private>secret\nstuff</private> this <PRIVATE>x</Private> too"
    assert strip_private(text) == "keep  this  too"


def test_strip_private_unclosed_span_hides_the_rest() -> None:
    assert strip_private("public <private>never closed secret") == "public "


def test_private_spans_nest() -> None:
    # A span holding another (a pasted note that had its own tags) ended at the inner closing
    # tag, and the rest of the outer span was kept.
    text = "a <private>client <private>phone</private> budget 50k</private> b </private> c"
    assert strip_private(text) == "a  b </private> c"
    # Tags that never balance (a mention of the tag before a real span): hidden up to the last
    # closing tag. Hidden to the end, a memory that said "wrap secrets in <private> tags" kept
    # nothing after its first span.
    assert sanitize_text("x <private>1 <private>2</private> 3") == "x  3"
    said = "Wrap them in <private> tags. Key: <private>abc</private>. Deploys on Fridays."
    assert strip_private(said) == "Wrap them in . Deploys on Fridays."
    said_lines = "Wrap them in <private> tags.\nKey: <private>abc</private>\nDeploys on Fridays."
    assert strip_private_lines(said_lines) == "Wrap them in \n\nDeploys on Fridays."
    lines = "a\n<private>\nclient\n<private>phone</private>\nbudget 50k\n</private>\nb"
    assert strip_private_lines(lines) == "a\n\n\n\n\n\nb"
    # Tags in a code span are text where no span is open.
    code = "Use `<private>` and `</private>`. <private>x</private> z"
    assert strip_private_lines(code) == "Use `<private>` and `</private>`.  z"


def test_strip_private_removes_injected_memory_block() -> None:
    text = "<memory>\n# Context\n- past thing\n</memory>\nWhat is next?"
    assert strip_private(text) == "What is next?"


def test_strip_private_keeps_lone_memory_tag() -> None:
    text = "const tag = '<memory>'; // no closing tag here"
    assert strip_private(text) == text


def test_strip_private_memory_block_with_attributes() -> None:
    assert strip_private('a<memory source="agmem">x</memory>b') == "ab"


# --- redact_secrets ---

SECRETS = [
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "sk-abcdefghijklmnopqrstuvwxyz0123456789",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "gho_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "glpat-abcdefghij0123456789",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_redact_known_token_shapes(secret: str) -> None:
    out = redact_secrets(f"config value {secret} end")
    assert secret not in out
    assert out == f"config value {REDACTED} end"


def test_redact_stripe_keeps_the_kind() -> None:
    out = redact_secrets("key sk_live_abcdefghijklmnop1234 here")
    assert out == f"key sk_live_{REDACTED} here"


def test_redact_private_key_block() -> None:
    text = "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\ny"
    assert redact_secrets(text) == f"x\n{REDACTED}\ny"


def test_redact_secrets_lines_keeps_every_line() -> None:
    text = "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\ny"
    text += "\nAuthorization: Bearer\n  abcdefgh12345678\nAPI_KEY=zzz"
    assert redact_secrets_lines(text) == (
        f"x\n{REDACTED}\n\n\n\ny\nAuthorization: Bearer\n  {REDACTED}\nAPI_KEY={REDACTED}"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def.ghi123", f"Authorization: Bearer {REDACTED}"),
        ('"authorization": "Basic dXNlcjpwYXNz"', f'"authorization": "Basic {REDACTED}"'),
        ("AUTHORIZATION=token12345678", f"AUTHORIZATION={REDACTED}"),
        ("curl -H 'bearer abcdefgh12345'", f"curl -H 'bearer {REDACTED}'"),
    ],
)
def test_redact_authorization_and_bearer(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_redact_password_in_url_keeps_user_and_host() -> None:
    out = redact_secrets("postgresql://app:s3cr3t!@db.example.com:5432/x and redis://:pw@h")
    assert out == f"postgresql://app:{REDACTED}@db.example.com:5432/x and redis://:{REDACTED}@h"


def test_url_without_password_untouched() -> None:
    text = "see https://example.com/a:b/c and http://user@host/"
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GEMINI_API_KEY=abc123", f"GEMINI_API_KEY={REDACTED}"),
        ('export DB_PASSWORD="hunter2 x"', f'export DB_PASSWORD="{REDACTED}"'),
        ("AWS_SECRET = 'xyz'", f"AWS_SECRET = '{REDACTED}'"),
        ("GITHUB_TOKEN=ghx", f"GITHUB_TOKEN={REDACTED}"),
        ("STRIPE_KEY=val # comment", f"STRIPE_KEY={REDACTED} # comment"),
    ],
)
def test_redact_env_assignments(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"password": "hunter22"}', f'{{"password": "{REDACTED}"}}'),
        ("client_secret: 'abcd1234'", f"client_secret: '{REDACTED}'"),
        ('apiKey = "zzzz9999"', f'apiKey = "{REDACTED}"'),
        ('"access_token":"tok_123456"', f'"access_token":"{REDACTED}"'),
    ],
)
def test_redact_quoted_credential_values(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


NEW_SHAPES = [
    # Each was stored as sent before its rule (privacy16).
    ("//registry.npmjs.org/:_authToken=npm_AbCdEf0123456789", "//registry.npmjs.org/:_authToken=@"),
    ("//npm.example.com/:_auth=dXNlcjpwYXNz", "//npm.example.com/:_auth=@"),
    ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "token @"),
    ("pypi-AgEIcHlwaS5vcmcCJDQ1ZjdkNWE5LWFhZjMtNDc2Yi05YjZmLTAwMDAwMDAwMDAwMA", "@"),
    ("mysql -u root -phunter2 shop", "mysql -u root -p@ shop"),
    ("mysqldump -h db -psecret shop > x.sql", "mysqldump -h db -p@ shop > x.sql"),
    ("MYSQL_PWD=swordfish mysql -u root", "MYSQL_PWD=@ mysql -u root"),
    ("password: hunter2", "password: @"),
    ("  DB_PASSWORD: hunter2", "  DB_PASSWORD: @"),
    ("[client]\npassword=hunter2\n", "[client]\npassword=@\n"),
    ("api_key = abc123def456 # dev", "api_key = @ # dev"),
    ("export github_token=x1y2z3", "export github_token=@"),
    (
        "AccountName=a;AccountKey=Zm9vYmFy+/==;EndpointSuffix=x",
        "AccountName=a;AccountKey=@;EndpointSuffix=x",
    ),
    (
        "Server=db;User ID=sa;Password=hunter2;Encrypt=true",
        "Server=db;User ID=sa;Password=@;Encrypt=true",
    ),
    ("Driver=x;Uid=sa;Pwd=s3cret;", "Driver=x;Uid=sa;Pwd=@;"),
    ("Driver=x;UID=sa;PWD=s3cret", "Driver=x;UID=sa;PWD=@"),
    ("mariadb -u app -pS3cret shop", "mariadb -u app -p@ shop"),
    ("GET /login?user=a&password=s3cret!", "GET /login?user=a&password=@"),
    ("mysql --password=swordfish", "mysql --password=@"),
    ("docker login -u me -p hunter2 ghcr.io", "docker login -u me -p @ ghcr.io"),
    ("podman login -u me -p hunter2 quay.io", "podman login -u me -p @ quay.io"),
    ("skopeo login --password s3cret ghcr.io", "skopeo login --password @ ghcr.io"),
    ("redis-cli -h cache -a hunter2 ping", "redis-cli -h cache -a @ ping"),
    (
        '{"auths": {"ghcr.io": {"auth": "dXNlcjpodW50ZXIy"}}}',
        '{"auths": {"ghcr.io": {"auth": "@"}}}',
    ),
]


def assert_redacted_on_every_path(text: str, expected: str, *, lines: bool = True) -> None:
    """`text` redacts to `expected` (`@` for each redaction) alone, on the hyperscan path (behind
    a long text) and, with `lines`, in a markdown file before chunking."""
    want = expected.replace("@", REDACTED)
    assert redact_secrets(text) == want
    padding = "-" * SHORT_TEXT + "\n"
    assert redact_secrets(padding + text) == padding + want
    if lines:
        assert redact_secrets_lines(text) == want


@pytest.mark.parametrize(("text", "expected"), NEW_SHAPES)
def test_redact_more_credential_shapes(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


def test_sanitize_json_redacts_a_docker_configs_auth() -> None:
    value = {"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpodW50ZXIy"}}}
    assert sanitize_json(value) == {"auths": {"https://index.docker.io/v1/": {"auth": REDACTED}}}
    # "auth" as a topic, not the base64 of user:password, is kept (a kv memory's notes).
    notes = {"auth": "refresh tokens rotate on every request", "x": {"auth": "required"}}
    assert sanitize_json(notes) == notes
    assert redact_secrets('{"auth": "required", "auth": "b2F1dGgy"}') == (
        '{"auth": "required", "auth": "b2F1dGgy"}'
    )


@pytest.mark.parametrize(
    "text",
    [
        "password: str",
        "    password: str | None = None",
        "token: Optional[str] = None",
        "secret: SecretStr",
        "password = get_password()",
        "    password=password,",
        "password = self.password",
        "TimeStampToken = rfc3161.TimeStampToken",
        "token = -1",
        "max_token: 4096",
        "PASSWORD_MIN_LENGTH = 8",
        "password: None",
        "token: ${{ secrets.NPM_TOKEN }}",
        "password: ${DB_PASSWORD}",
        "    token: str:",
        "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
        'f"AccountName={name};AccountKey={self.account_key};"',
        "mysql -u root -p shop",
        "mysql -h db -P 3306 -u app -p",
        "mkdir -p build/out",
        "docker login -u me --password-stdin",
        "await page.login(user, pw) # login -p flag",
        "OLDPWD=/home/dev",
        "hf_hub_download(repo_id=x)",
        "git log 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "id 123e4567-e89b-12d3-a456-426614174000",
        "the password is set in the vault: see docs",
    ],
)
def test_new_rules_leave_ordinary_code_alone(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


@pytest.mark.parametrize(
    "text",
    [
        # Other commands' options after a path, a word or a tool named like the client
        # (fixpriv16: the rule fired after `mysql` anywhere and redacted the next `-p...`).
        "find /var/lib/mysql -name '*.ibd' -print",
        "find /var/lib/mysql -type f -perm 600",
        "find /var/lib/mysql -name tmp -prune",
        "gcc -o app app.c $(mysql_config --cflags --libs) -pthread",
        "cp -r /etc/mysql/conf.d /backup -pv",
        "The mysql server listens; run python -pfoo",
        "sudo systemctl restart mysql && mkdir -pv out",
        "echo mysql\nmkdir -pv out",
        "After docker login, run the container with -p 8080:80 nginx",
        "After docker login run the container with -p 8080:80 nginx",
        "see redis-cli docs -a flag then ssh -a host",
    ],
)
def test_command_password_rules_need_the_command(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The client run where a shell runs it: after a separator, a prompt, a wrapper, a YAML
        # step, in a container.
        ("cd /srv && mysql -uroot -phunter2 shop", "cd /srv && mysql -uroot -p@ shop"),
        ("sudo mysql -uroot -phunter2", "sudo mysql -uroot -p@"),
        ("$ mysql -uroot -phunter2", "$ mysql -uroot -p@"),
        ("    mysqldump -uroot -phunter2 shop", "    mysqldump -uroot -p@ shop"),
        ("x=$(mysql -N -phunter2 -e 'select 1')", "x=$(mysql -N -p@ -e 'select 1')"),
        ("  - mysql -uroot -phunter2 < schema.sql", "  - mysql -uroot -p@ < schema.sql"),
        ("run: mysql -uroot -phunter2", "run: mysql -uroot -p@"),
        ("env MYSQL_HOST=db mysql -uroot -phunter2", "env MYSQL_HOST=db mysql -uroot -p@"),
        (
            "docker exec -it db mysql -uroot -phunter2 shop",
            "docker exec -it db mysql -uroot -p@ shop",
        ),
        (
            "kubectl exec -it db -- mariadb -uroot -phunter2",
            "kubectl exec -it db -- mariadb -uroot -p@",
        ),
        ("mariadb-dump -uroot -phunter2 shop", "mariadb-dump -uroot -p@ shop"),
        (
            "echo x | sudo docker login -u me -p hunter2 ghcr.io",
            "echo x | sudo docker login -u me -p @ ghcr.io",
        ),
        ('sh -c "redis-cli -a hunter2 ping"', 'sh -c "redis-cli -a @ ping"'),
    ],
)
def test_command_password_rules_find_the_command(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Each was kept (fixpriv16).
        ("mysql -u root -p'hunter2' mydb", "mysql -u root -p'@' mydb"),
        ('mysql -u root -p"hunter2" mydb', 'mysql -u root -p"@" mydb'),
        ("docker login -u me -p 'hunter2' ghcr.io", "docker login -u me -p '@' ghcr.io"),
        (
            'docker login -u me --password "hunter 2" ghcr.io',
            'docker login -u me --password "@" ghcr.io',
        ),
        ("redis-cli -a 'hunter2' ping", "redis-cli -a '@' ping"),
        ("redis-cli --pass hunter2 ping", "redis-cli --pass @ ping"),
    ],
)
def test_command_password_rules_redact_quoted_values(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected.replace("@", REDACTED)
    assert redact_secrets_lines(text) == expected.replace("@", REDACTED)


@pytest.mark.parametrize(
    "text",
    [
        "mysql -u root -p hunter2",  # a lone -p prompts: hunter2 is the database
        'mysql -u root -p"$MYSQL_PASSWORD" shop',
        'docker login -u me -p "${TOKEN}" ghcr.io',
        "redis-cli -a '' ping",
    ],
)
def test_command_password_rules_keep_prompts_and_references(text: str) -> None:
    assert redact_secrets(text) == text


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "text",
    [
        # `aws iam create-access-key` and `aws sts assume-role` print it as JSON.
        f'{{"AccessKeyId": "AKIAIOSFODNN7EXAMPLE", "SecretAccessKey": "{AWS_SECRET}"}}',
        # ~/.aws/credentials, boto3 keywords, a compose file's environment.
        f"[default]\naws_secret_access_key = {AWS_SECRET}\n",
        f"boto3.client('s3', aws_secret_access_key='{AWS_SECRET}')",
        f"      AWS_SECRET_ACCESS_KEY: {AWS_SECRET}",
        f"aws-secret-access-key: {AWS_SECRET}",
    ],
)
def test_redact_aws_secret_access_keys(text: str) -> None:
    # The access key id was redacted and its secret, the credential itself, kept.
    out = redact_secrets(text)
    assert AWS_SECRET not in out
    assert out == text.replace(AWS_SECRET, REDACTED).replace("AKIAIOSFODNN7EXAMPLE", REDACTED)


def test_aws_secret_rule_leaves_code_naming_the_key_alone() -> None:
    for text in (
        "boto3.client('s3', aws_secret_access_key=secret_key)",
        "aws_secret_access_key = settings.AWS_SECRET_ACCESS_KEY",
        'secretAccessKey: "<your secret access key here>"',
    ):
        assert redact_secrets(text) == text


def test_sanitize_json_redacts_secret_access_keys() -> None:
    value = {"SecretAccessKey": "x", "aws_secret_access_key": "y", "secret-access-key": "z"}
    assert sanitize_json(value) == dict.fromkeys(value, REDACTED)


GATE_SAMPLES = [
    *SECRETS,
    "x: 1\u2028password: hunter2x9",
    # Generation 15's rules (privacy28).
    "client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVB",
    "\ncurl -u admin:hunter2x9 https://x",
    'curl -H "PRIVATE-TOKEN: abcdEFGH1234ijkl" -H "Private-Token: abcdEFGH1234ijkl" https://x',
    "npm_aB3dEfGh1JkLmN0pQrStUvWxYz0123456789",
    f'"SecretAccessKey": "{AWS_SECRET}" aws_secret_access_key={AWS_SECRET}',
    f"AWS_SECRET_ACCESS_KEY: {AWS_SECRET} aws-secret-access-key: {AWS_SECRET}",
    "key sk_live_abcdefghijklmnop1234 rk_test_abcdefghijklmnop1234",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
    "Authorization: Bearer abc.def.ghi123 AUTHORIZATION=token12345678 BEARER abcdefgh1234",
    "postgresql://app:s3cr3t!@db.example.com:5432/x",
    "GEMINI_API_KEY=abc AWS_SECRET='x' GITHUB_TOKEN=g DB_PASSWORD=p X_PASSWD=p X_CREDENTIALS=c",
    "X_CREDENTIAL=c MY_AUTH=a",
    '{"password": "hunter22", "Secret": "abcd1234", "TOKEN": "abcd1234", "PASSWD": "abcd1234",'
    ' "SECRET": "abcd1234", "token": "abcd1234"}',
    '{"apiKey": "zzzz9999", "api-key": "zzzz9999", "API_KEY": "zzzz9999", "Api_Key": "zzzz"}',
    *(text for text, _ in NEW_SHAPES),
    "Authorization header from gcloud: ya29.a0AfH6SMBx-Qk3rT9vLp2mZ",
    # privacy19's names.
    '{"secretKey": "abcd1234", "SECRET_KEY": "abcd1234", "X-API-Key": "abcd1234"}',
    '{"privateKey": "abcd1234", "PRIVATE_KEY": "abcd", "signingKey": "abcd"}',
    '{"SIGNING_KEY": "abcd1234"}',
    '{"authKey": "abcd1234", "AUTH_KEY": "abcd1234", "passphrase": "abcd", "PASSPHRASE": "abcd"}',
    '{"DB_PASS": "abcd", "db-pass": "abcd", "dbPass": "abcd", "pwd": "abcd", "dbPwd": "abcd"}',
    '{"PWD": "abcd1234"} DB_PASS=x PASSPHRASE=x',
    "curl -H 'X-API-Key: abcd1234efgh' -H 'X-Auth-Token: abcd1234efgh'",
    "curl -H 'X-API-KEY: abcd1234efgh' -H 'X-AUTH-TOKEN: abcd1234efgh' -H 'x-api-key: abcd1234'",
    "pwd: hunter2",
    "--password swordfish --api-key=x1 --TOKEN x",
    "--api_token x1 --no_password x",
    '"apiKeys": [\n "k1abc",\n "k2abc",\n]',
    '{"apiKeys": ["k1"], \'PASSWORDS\': [\'a\'], "secrets":[], "pwds" : [ 3 ]}',
    # A list rule each stem (fixprivacy22): every one of them exercised.
    '{"tokens": ["a"], "keys": ["a"], "passphrases": ["a"], "dbPwds": ["a"], "pwd": ["a"]}',
    '{"credentials": ["a"], "SECRETS": ["a"], "TOKENS": ["a"], "KEYS": ["a"], "PWDS": ["a"]}',
    '{"PASSPHRASE": ["a"], "CREDENTIALS": ["a"], "PASSWDS": ["a"], "passwds": ["a"]}',
    # An empty list fails the list rules' pattern since privacy23 (a list of names does); and
    # each list rule's gate is seen firing where its rule redacts (privacy23).
    '{"secrets": ["a"]}',
    '{"tokens": ["a1B2c3D4e5F6g7H8i9"], "TOKENS": ["a1B2c3D4e5F6g7H8i9"], "api_keys": ["k1"]}',
    '{"apiKeys": ["k1abc"], "API_KEYS": ["k1abc"], "PWDS": ["a"], "credentials": ["s3cr3t!"]}',
    '{"CREDENTIALS": ["s3cr3t!"], "SECRETS": ["a"], "PASSPHRASES": ["a"], "PASSWORDS": ["a"]}',
    "db:\n  passwords: [hunter2, x]\n  pwds: [s3cr3t!]\n",
    # TOML's and INI's lists (privacy24), a multi-line one too.
    '[db]\npasswords = ["hunter2", "x9!"]\napi_keys = [\n  "sk-abc123def456",\n]\n',
    "TOKENS = ['Xk9qLm2Pz7Rt']\n\"secrets\" = [['s3cr3t!']]\nPWDS = ['a1']\n",
]


def test_every_match_contains_its_gate_literal() -> None:
    """redact_secrets runs a pattern only when one of its literals occurs: never skip a match."""
    texts = GATE_SAMPLES + [p.read_text(encoding="utf-8", errors="replace") for p in REAL_FILES]
    matched = set()
    for literals, pattern, _ in _RULES:
        for text in texts:
            for match in pattern.finditer(text):
                matched.add(pattern.pattern)
                assert any(literal in match.group(0) for literal in literals), (
                    pattern.pattern,
                    match.group(0),
                )
    # The samples exercise every rule, so the check above is not vacuous.
    assert matched == {pattern.pattern for _, pattern, _ in _RULES}


@pytest.mark.parametrize(
    "text",
    [
        "if TOKEN == other: pass",
        "max_tokens = 1024",
        "the task-runner-abcdefghijklmnopqrstuvwxyz ran",
        "MAX_TOKENS=100",
        "PWD=/home/dev",
        "mask-abcdefghijklmnopqrstuvwxyz0123",
        "broken = 'value'",
        "print(desk-abcdefghijklmnopqrstuvwxyz)",
    ],
)
def test_ordinary_code_is_not_redacted(text: str) -> None:
    assert redact_secrets(text) == text


def test_redaction_is_idempotent() -> None:
    once = redact_secrets("API_KEY=abc Authorization: Bearer abcdefgh123 pw='hunter22'")
    assert redact_secrets(once) == once


# --- sanitize ---


def test_sanitize_text_does_everything() -> None:
    text = "ok\x00 <private>mine</private> sk-abcdefghijklmnopqrstuvwxyz0123 \ud800"
    assert sanitize_text(text) == f"ok  {REDACTED} \ufffd"


def test_sanitize_json_cleans_keys_values_and_nesting() -> None:
    value: Any = {
        "k\x00ey": ["a\x00", {"deep": "<private>x</private>y"}],
        "n": 3,
        "b": True,
        "z": None,
        "f": 1.5,
    }
    assert sanitize_json(value) == {
        "key": ["a", {"deep": "y"}],
        "n": 3,
        "b": True,
        "z": None,
        "f": 1.5,
    }


def test_sanitize_json_redacts_values_of_credential_keys() -> None:
    value = {"password": "x", "apiKey": "short", "nested": {"GITHUB_TOKEN": "abc"}, "tokens": 12}
    assert sanitize_json(value) == {
        "password": REDACTED,
        "apiKey": REDACTED,
        "nested": {"GITHUB_TOKEN": REDACTED},
        "tokens": 12,
    }


def test_sanitize_json_keys_long_or_repeated_are_treated_alike() -> None:
    """Short keys are sanitized once and remembered; long ones each time: the same answers."""
    long_name = "x" * 120 + "_password"
    value = {"password": "x", long_name: "y", "<private>k</private>" + "z" * 120: "v", "a": "b"}
    expected = {"password": REDACTED, long_name: REDACTED, "z" * 120: "v", "a": "b"}
    assert sanitize_json(value) == expected
    assert sanitize_json(value) == expected


def test_sanitize_json_keeps_non_credential_keys() -> None:
    value = {"max_tokens": "100", "keyword": "token bucket", "file_path": "/a/b.py"}
    assert sanitize_json(value) == value


def test_sanitize_json_refuses_deep_nesting() -> None:
    value: Any = "leaf"
    for _ in range(70):
        value = [value]
    with pytest.raises(NestingTooDeep):
        sanitize_json(value, max_depth=64)
    assert sanitize_json(value, max_depth=80) == value


def test_json_depth_counts_and_stops_at_limit() -> None:
    assert json_depth("x") == 0
    assert json_depth({"a": [1, {"b": 2}]}) == 3
    value: Any = 1
    for _ in range(1000):
        value = [value]
    assert json_depth(value, limit=10) == 11


# --- cap_text ---


def test_cap_text_short_text_unchanged() -> None:
    assert cap_text("abc", 10) == "abc"


def test_cap_text_keeps_head_and_tail_and_states_size() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = cap_text(text, 1000)
    assert len(out) <= 1000
    assert out.startswith("HEAD")
    assert out.endswith("TAIL")
    assert "10008 chars originally" in out


def test_cap_text_five_megabytes_fast() -> None:
    text = "line of output\n" * 350_000
    started = time.thread_time()
    out = cap_text(text, 65_536)
    assert time.thread_time() - started < 0.05
    assert len(out) <= 65_536
    assert f"{len(text)} chars originally" in out


def test_cap_text_tiny_cap_still_bounded() -> None:
    assert cap_text("x" * 500, 20) == "x" * 20


# --- real agent data ---


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_real_files_survive_sanitizing(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    out = sanitize_text(text)
    # These public files hold no real credentials: at most a placeholder gets redacted.
    assert out.count(REDACTED) <= 1
    assert abs(len(out) - len(text)) < 100


def test_real_transcript_lines_sanitize_as_json() -> None:
    path = TESTDATA / "gemini" / "vct_gemini_session_jsonl_format.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        value = json.loads(line)
        assert json.dumps(sanitize_json(value))


def test_sanitize_is_fast_on_a_large_real_file() -> None:
    text = (TESTDATA / "gemini" / "vct_gemini_session_jsonl_format.jsonl").read_text()
    sanitize_text(text)
    started = time.thread_time()
    for _ in range(5):
        sanitize_text(text)
    per_call = (time.thread_time() - started) / 5
    # ~120 KB; a generous bound so a loaded machine does not fail it, yet catches a slow regex.
    assert per_call < 0.1


# --- one scan for every literal (app/textscan.py) gives what one `in` test per rule gave ---


def _redact_rule_by_rule(s: str) -> str:
    """The redaction as it ran before the one-pass scan: each rule's literals tested on the
    text as the earlier rules left it."""
    for literals, pattern, replacement in _RULES:
        if any(literal in s for literal in literals):
            s = pattern.sub(replacement, s)
    return s


def _sanitize_rule_by_rule(s: str) -> str:
    s = clean_text(s)
    if "<" in s:
        if "rivate" in s or "RIVATE" in s:
            s = re.sub(
                r"<(?i:private)(?:\s[^>]*)?>.*?(?:</(?i:private)\s*>|\Z)", "", s, flags=re.DOTALL
            )
        if "emory" in s or "EMORY" in s:
            s = re.sub(r"<(?i:memory)(?:\s[^>]*)?>.*?</(?i:memory)\s*>\n?", "", s, flags=re.DOTALL)
    return _redact_rule_by_rule(s)


def test_one_pass_redaction_equals_rule_by_rule_on_real_and_secret_texts() -> None:
    secrets = " ".join(GATE_SAMPLES)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in REAL_FILES]
    # Long texts take the one-pass path; secrets placed at the start, middle and end of each.
    texts += [secrets + text[:5000] + secrets + text[-5000:] + secrets for text in texts]
    texts += GATE_SAMPLES
    redacted = 0
    for text in texts:
        assert redact_secrets(text) == _redact_rule_by_rule(text)
        assert sanitize_text(text) == _sanitize_rule_by_rule(text)
        redacted += REDACTED in redact_secrets(text)
    assert redacted > len(REAL_FILES)


def test_a_literal_joined_by_stripping_a_private_span_is_still_redacted() -> None:
    # "KEY" exists only once the private span between "KE" and "Y" is gone.
    text = "padding " * 40 + "API_KE<private>hidden</private>Y=abcd1234efgh"
    assert sanitize_text(text) == "padding " * 40 + f"API_KEY={REDACTED}"


def test_memory_and_private_spans_in_long_text_are_removed() -> None:
    text = "x" * 1000 + "<private>a\nb</private>" + "y" * 10 + "<memory>m</memory>\n" + "z"
    assert sanitize_text(text) == "x" * 1000 + "y" * 10 + "z"


# --- the hyperscan gates of the common-word rules match wherever their rule can ----------------

GATED_SAMPLES = [
    'token:\u00a0"abcdef12"',
    "password =\u3000 'hunter22'",
    'secret\x1c:\x1f"xxxx"',
    '"api_key"\u2028:\n"k-123456"',
    "API-KEY= 'zzzz'",
    'Token: "ab cd"',
    "PASSWORD: 'x y z w'",
    "https://user:pässword@host/x https://a:b@c",
    "postgres://app:s3cr\u00e9t@db:5432/app",
    # A line that another break than `\n` starts (privacy27).
    "x: 1\u2028  - db_password:\u00a0hunter2x9",
    "progress\r\u3000export API_TOKEN=s3cr3t-9\r\n",
    "a\x0cpasswd: letmein\x0c",
]


def test_rule_gates_fire_wherever_their_rule_matches() -> None:
    """A gated rule that matches a text always has its gate in the scan of that text."""
    padding = "-" * SHORT_TEXT  # long enough to take the hyperscan path
    texts = [padding + s for s in GATED_SAMPLES + GATE_SAMPLES]
    texts += [p.read_text(encoding="utf-8", errors="replace") for p in REAL_FILES]
    fired = set()
    # A list rule's gate fires where the rule changes the text (privacy23): a match that it
    # leaves as it is (a list in a line of code, `queryKey: [...],`) needs no run of it.
    replacements = {pattern: replacement for _, pattern, replacement in _RULES}
    listed = {pattern for _, pattern, _ in privacy_lists.LIST_RULES}
    for text in texts:
        found = _SCANNER.present(text)
        for pattern in _RULE_GATES:
            if pattern in listed:
                matched = pattern.sub(replacements[pattern], text) != text
            else:
                matched = pattern.search(text) is not None
            if matched:
                fired.add(pattern)
                assert f"gate:{pattern.pattern}" in found, (pattern.pattern, text[-80:])
    assert fired == set(_RULE_GATES)
    # And the gates do skip: ordinary mentions of the words are not credentials.
    found = _SCANNER.present(padding + "max_tokens: 100, the api key is in the vault, http://x/")
    assert not any(name.startswith("gate:") for name in found)


def test_gated_redaction_on_unicode_spaced_credentials() -> None:
    for text in GATED_SAMPLES:
        assert redact_secrets("-" * SHORT_TEXT + text) == _redact_rule_by_rule(
            "-" * SHORT_TEXT + text
        )
    assert "hunter22" not in redact_secrets("-" * SHORT_TEXT + "password =\u3000 'hunter22'")


def _rule_changed(index: int, **change: Any) -> list[Any]:
    rules = list(_RULES)
    literals, pattern, replacement = rules[index]
    rules[index] = (
        change.get("literals", literals),
        change.get("pattern", pattern),
        change.get("replacement", replacement),
    )
    return rules


def test_rules_version_follows_all_that_decides_a_rules_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fixpriv16: the version hashed the pattern strings only, so widening a rule by a flag, a
    # literal or its gate, or changing what it leaves, did not re-chunk memory files.
    import app.privacy.version as privacy
    from app.privacy.common import _keep_group

    assert privacy._rules_version() == privacy.RULES_VERSION
    # The same in another process: nothing in it may depend on an address or a hash seed.
    other = subprocess.run(
        [sys.executable, "-c", "from app.privacy import RULES_VERSION; print(RULES_VERSION)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == privacy.RULES_VERSION
    keep = next(i for i, rule in enumerate(_RULES) if rule[0] == ("Key=",))
    literals, pattern, _ = _RULES[keep]
    gated = next(iter(_RULE_GATES))
    changes: dict[str, tuple[str, Any]] = {
        "flags": ("_RULES", _rule_changed(keep, pattern=re.compile(pattern.pattern, re.I))),
        "literal": ("_RULES", _rule_changed(keep, literals=(*literals, "key="))),
        "replacement": ("_RULES", _rule_changed(keep, replacement="[HIDDEN]")),
        "kept group": (
            "_RULES",
            _rule_changed(keep, replacement=_keep_group("other")),
        ),
        "gate": ("_RULE_GATES", {**_RULE_GATES, gated: "x"}),
        "code": ("_RULES_CODE_VERSION", -1),
        "credential words": ("_CREDENTIAL_WORDS", frozenset({"token"})),
    }
    for what, (name, value) in changes.items():
        with monkeypatch.context() as patch:
            patch.setattr(privacy, name, value)
            assert privacy._rules_version() != privacy.RULES_VERSION, what


@pytest.mark.parametrize(
    "text",
    [
        # Placeholders and names the generic rules took for credentials (fixpriv16).
        "  -p, --password=PASSWORD   Password to use",
        'conn = psycopg.connect("dbname=app user=app password=%s" % pw)',
        "cursor.execute('SELECT 1 WHERE password=%(pw)s', {'pw': pw})",
        "BUILD_PWD=/home/user/src",
        "token: v1.2.3",
    ],
)
def test_generic_rules_leave_placeholders_alone(text: str) -> None:
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mysqladmin --password=HUNTER2 status", "mysqladmin --password=@ status"),
        ("--password=Hunter", "--password=@"),
        ("host=db password=s3cret%s", "host=db password=@"),
        ("MYSQL_PWD=s3cret/x", "MYSQL_PWD=@"),
        ("token: v1a2b3c4d5", "token: @"),
    ],
)
def test_generic_rules_still_redact_near_placeholders(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected.replace("@", REDACTED)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A bare value ends where the shell ends the word (fixpriv16: the closing backtick or
        # parenthesis went with it).
        ("run `mysql -uroot -phunter2` first", "run `mysql -uroot -p@` first"),
        ("x=$(mysql -uroot -phunter2)", "x=$(mysql -uroot -p@)"),
        ("redis-cli -a hunter2;ls", "redis-cli -a @;ls"),
    ],
)
def test_command_password_value_ends_with_the_shell_word(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected.replace("@", REDACTED)


# --- names of secrets and pagination cursors are not secrets (redact17) ------------------------

REFERENCES = [
    # Helm charts name a Kubernetes Secret that holds the credential: the name is not one.
    "existingSecret: my-db-secret",
    "  existingSecret: my-db-secret",
    "auth.existingSecret: my-db-secret",
    'existingSecret: "my-db-secret"',
    '"existingSecret": "my-db-secret"',
    "existing-secret: my-db-secret",
    "EXISTING_SECRET=db-creds",
    # Pagination cursors: the page after this one, not a credential.
    "next_token: page2",
    "nextToken: page2",
    "nextPageToken: CAIQAA2",
    "pageToken: page-2",
    "continuation_token: abc-2",
    "ContinuationToken: 2",
    "cursor_token: abc2",
    "sync_token: 12345",
    "nextSyncToken: CAIQAA",
    '"next_token": "page2"',
    'next_token = "page2"',
    "NEXT_TOKEN=page2",
    # Names that only mention the word: they were left alone and must stay so.
    "secretName: my-tls-secret",
    "secretRef: app-secrets",
    "secretKeyRef: db-creds",
    "tokenUrl: https://auth.example.com/oauth/token",
    "token_type: bearer",
    "token_endpoint: https://x/token",
    "passwordFile: /run/secrets/db-pass",
    "api_key_env: OPENAI_API_KEY",
]


@pytest.mark.parametrize("text", REFERENCES)
def test_names_of_secrets_and_cursors_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets_lines(text) == text


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("my-db-secret", "existingSecret"),
        ("page2", "next_token"),
        ("page2", "next-page-token"),
        ("CAIQAA", "nextPageToken"),
        ("bearer", "token_type"),
    ],
)
def test_json_names_of_secrets_and_cursors_are_kept(value: str, key: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Real credentials, also under names that end like the ones above, stay redacted.
        ("password: hunter2", "password: @"),
        ("token: ghx-9f8a7b6c5d", "token: @"),
        ("api_key: abc123", "api_key: @"),
        ("secret: s3cr3t", "secret: @"),
        ("client_secret: 0a1b2c3d", "client_secret: @"),
        ("db_password: p4ss", "db_password: @"),
        ("DB_PASSWORD=hunter2", "DB_PASSWORD=@"),
        ("access_token: abc-2", "access_token: @"),
        ("refresh_token: page2x", "refresh_token: @"),
        ("contextToken: abc-2", "contextToken: @"),
        ("existingPassword: hunter2", "existingPassword: @"),
        ('"secret": "my-db-secret"', '"secret": "@"'),
        ('session_token = "page2x1"', 'session_token = "@"'),
        # A credential's shape is redacted under any name.
        ("next_token: ghp_" + "a" * 36, "next_token: @"),
        ("existingSecret: AKIA" + "A" * 16, "existingSecret: @"),
    ],
)
def test_credentials_near_reference_names_are_redacted(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected.replace("@", REDACTED)


def test_json_credentials_near_reference_names_are_redacted() -> None:
    value = {
        "token": "page2",
        "access_token": "x",
        "next_token_secret": "x",
        "existing_password": "y",
    }
    assert sanitize_json(value) == dict.fromkeys(value, REDACTED)


# Credentials under names the reference exemption took by their name alone (fixredact17): the
# name may be a cursor's or a Secret's, the value decides. A prefix (`FB_`, `REPO_`) makes
# `page`/`sync`/`resume`/`start` + `token` the token of a service, not a cursor.
_HEX40 = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
_FB = "EAAGm0PX4ZCpsBAKZC9Zx7yQwErTy8UiOpAsDfGhJkLz"
CREDENTIALS_UNDER_REFERENCE_NAMES = [
    (f"FB_PAGE_TOKEN={_FB}", "FB_PAGE_TOKEN=@"),
    (f"page_token: {_FB}", "page_token: @"),
    (f"REPO_SYNC_TOKEN={_HEX40}", "REPO_SYNC_TOKEN=@"),
    ("export CROWDIN_SYNC_TOKEN=a1b2c3d4e5f6a7b8c9d0", "export CROWDIN_SYNC_TOKEN=@"),
    ("DOCS_SYNC_TOKEN: docs-2f8a7c1e9b", "DOCS_SYNC_TOKEN: @"),
    ("TWILIO_SYNC_TOKEN=SKa8f7b6c5d4e3f2a1b0c9d8e7f6a5b4c3", "TWILIO_SYNC_TOKEN=@"),
    ("RESUME_TOKEN=Zm9vYmFyYmF6cXV4c2VjcmV0a2V5==", "RESUME_TOKEN=@"),
    (f"START_TOKEN={_HEX40}", "START_TOKEN=@"),
    (f"prevToken='{_HEX40}'", "prevToken='@'"),
    ("EXISTING_SECRET=s3cr3tP@ssw0rd!", "EXISTING_SECRET=@"),
    ("existingSecret: hunter2-Real-Pa55", "existingSecret: @"),
    ("existingSecret: hunter2-real-pa55", "existingSecret: @"),
    ('existingSecret: "s3cr3tP@ssw0rd!"', 'existingSecret: "@"'),
    ("fbPageToken: page2", "fbPageToken: @"),
    ("NextToken: eyJ2IjoxfQ", "NextToken: @"),
    ("ContinuationToken: 1ueGcxLPRx1Tr", "ContinuationToken: @"),
    ("sync_token: 123abc", "sync_token: @"),
    ("next_token: abc123def456ghi789", "next_token: @"),
    # A Google OAuth access token: its dots made it an attribute path to the unquoted rule.
    ("access_token: ya29.a0AfH6SMBx-Qk3rT9vLp2", "access_token: @"),
    ("curl -d token=ya29.a0AfH6SMBx-Qk3rT9vLp2mZ", "curl -d token=@"),
]


@pytest.mark.parametrize(("text", "expected"), CREDENTIALS_UNDER_REFERENCE_NAMES)
def test_credentials_under_reference_names_are_redacted(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected.replace("@", REDACTED)
    assert redact_secrets_lines(text) == expected.replace("@", REDACTED)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("page_token", _FB),
        ("sync_token", "abc123def456ghi789"),
        ("existing_secret", "hunter2-Real-Pa55"),
        ("existing-secret", "s3cr3tP@ssw0rd!"),
        ("FB_PAGE_TOKEN", "page2"),
        ("next_page_token", _HEX40),
    ],
)
def test_json_credentials_under_reference_names_are_redacted(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: REDACTED}
    assert redact_json({key: value}) == {key: REDACTED}


# The rules' digest of each generation. A change of the rules moves RULES_VERSION: bump
# RULES_GENERATION with it and add the pair here, so that the worker of this build rescans a
# database redacted under older rules, and leaves one redacted under newer rules alone.
RULES_GENERATIONS = {
    2: "365611fd712337b4",
    3: "8af492f9428a103e",
    4: "7572ba9168caef34",
    5: "7d171d86db8eb46a",
    6: "39bba4cdebd876c6",
    7: "bb7220d7860d1516",
    8: "c78aaaf9693b1ee0",
    9: "c83b91ffa1ab7f56",
    10: "5caab8102dd320cd",
    11: "3e260cdb0fada3d2",
    12: "9c3e2733cc7c348c",
    13: "d845e06f12cc5c5d",
    14: "61182613defa1132",
    15: "d5be7fb2911d8e14",
}


def test_rules_generation_moves_with_the_rules() -> None:
    assert RULES_GENERATIONS.get(RULES_GENERATION) == RULES_VERSION
    assert RULES_GENERATION == max(RULES_GENERATIONS)


# --- camelCase and PascalCase credential keys in JSON (privacy18) -------------------------------

# Each was kept whole by sanitize_json before privacy18 (only a `_`/`-` split a key's words, so
# `githubToken` and `dbPassword` named nothing): the text rules catch a value of a token's shape,
# not a password or a token of no known shape.
CAMEL_CASE_CREDENTIAL_KEYS = [
    "githubToken",
    "GithubToken",
    "dbPassword",
    "DbPassword",
    "adminPassword",
    "mysqlRootPassword",
    "botToken",
    "sessionToken",
    "idToken",
    "bearerToken",
    "webhookSecret",
    "appSecret",
    "ApiToken",
    "personalAccessToken",
    "npmAuthToken",
    "xApiKey",
    "openaiApiKey",
    "OpenAIAPIKey",
    "awsSecretAccessKey",
    "dbCredentials",
    "github.token",
    "password2",
    "secretKey",
    "secret_key",
    "SECRET_KEY",
    "jwtSecretKey",
    # Matched before too; they must stay so.
    "apiKey",
    "APIKey",
    "clientSecret",
    "accessToken",
    "AuthToken",
    "x-api-key",
    "X-API-Key",
    "accesstoken",
    "privateKey",
    "GITHUB_TOKEN",
]


@pytest.mark.parametrize("key", CAMEL_CASE_CREDENTIAL_KEYS)
@pytest.mark.parametrize("value", ["hunter22", "correct horse battery staple", "x"])
def test_json_camel_case_credential_keys_are_redacted(key: str, value: str) -> None:
    assert sanitize_json({"config": {key: value}}) == {"config": {key: REDACTED}}
    assert redact_json({"config": {key: value}}) == {"config": {key: REDACTED}}


# Keys whose words hold a credential's word without naming one, found in the venv's
# site-packages and the shared test data (notes18/scratch/privacy18/keys.py): counts, limits,
# types, names and references of secrets, and keys that only end in "key".
CAMEL_CASE_KEYS_KEPT = [
    "tokenizer",
    "maxTokens",
    "max_tokens",
    "tokenCount",
    "token_budget",
    "inputTokens",
    "totalTokens",
    "tokens",
    "tokenType",
    "tokenUrl",
    "tokenEndpoint",
    "secretName",
    "existingSecretName",
    "secretRef",
    "secretKeyRef",
    "secrets",
    "passwordFile",
    "passwordPolicy",
    "passwordLength",
    "apiKeyId",
    "apiKeyName",
    "keyboard",
    "primaryKey",
    "publicKey",
    "sortKey",
    "monkey",
    "existingClaim",
    "existingSecretPasswordKey",
    "accessKey",
]


@pytest.mark.parametrize("key", CAMEL_CASE_KEYS_KEPT)
def test_json_keys_that_only_mention_a_credential_word_are_kept(key: str) -> None:
    value = {key: "value-1 of Some shape"}
    assert sanitize_json(value) == value
    assert redact_json(value) == value


# Tokens that are no credential by the word before them: a tokenizer's special tokens (a
# tokenizer_config.json of the venv's wordllama holds `"unk_token": "<unk>"`, redacted before
# privacy18) and an MCP request's `progressToken`.
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("unk_token", "<unk>"),
        ("pad_token", "[PAD]"),
        ("eos_token", "</s>"),
        ("bosToken", "<s>"),
        ("mask_token", "<mask>"),
        ("sep_token", "[SEP]"),
        ("cls_token", "[CLS]"),
        ("special_token", "<|endoftext|>"),
        ("progressToken", "req-17"),
    ],
)
def test_tokens_of_a_tokenizer_or_a_progress_report_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


# Helm and Kubernetes name the Secret holding a credential, and the key in it, under names that
# end in one: the value is a name when it has a name's shape, and then it is kept.
SECRET_REFERENCES = [
    ("existingPasswordSecret", "my-db-secret"),
    ("existing_admin_secret", "grafana-admin"),
    ("auth.existingSecret", "my-db-secret"),
    ("passwordSecretKey", "postgres-password"),
    ("passwordSecretKey", "password"),
    ("adminPasswordSecretKey", "admin-password"),
    ("existingSecretKey", "redis-password"),
]


@pytest.mark.parametrize(("key", "value"), SECRET_REFERENCES)
def test_names_of_secrets_and_their_keys_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}
    for text in (f"{key}: {value}", f'"{key}": "{value}"', f"  {key}: '{value}'"):
        assert redact_secrets(text) == text


def test_a_secret_key_ref_is_kept() -> None:
    value = {
        "env": [
            {
                "name": "DB_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}},
            }
        ]
    }
    assert sanitize_json(value) == value
    assert redact_json(value) == value
    text = "valueFrom:\n  secretKeyRef:\n    name: db-creds\n    key: password\n"
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # A reference name with a credential's shape, or a name that is no reference.
        ("passwordSecretKey", "s3cr3tP@ss"),
        ("passwordSecretKey", "Hunter2-pass"),
        ("existingPasswordSecret", "hunter2-Real-Pa55"),
        ("passwordSecret", "hunter22"),
        ("jwtSecretKey", "my-jwt-secret"),
        ("secretKey", "minio-secret"),
        ("tokenSecret", "oauth-token-secret"),
        ("appPasswordSecret", "my-db-secret"),
        # Names that privacy18 took for references (fixprivacy18): no chart's, and each is also
        # an application's credential (`PASSWORD_SECRET`, `TOKEN_SECRET_KEY`).
        ("passwordSecret", "db-password-secret"),
        ("tokenSecretKey", "api.token"),
    ],
)
def test_credentials_under_secret_reference_names_are_redacted(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: REDACTED}
    assert redact_json({key: value}) == {key: REDACTED}


# --- review of privacy18 (fixprivacy18) ---------------------------------------------------------


class _CountingWords(frozenset[str]):
    """The credential words, counting the look-ups made in them (the work a key costs)."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        type(self).lookups += 1
        return super().__contains__(item)


def test_a_long_key_of_capitals_costs_a_bounded_number_of_look_ups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every start inside a run of capitals was tried, each slicing the rest of the key: a 200k
    # key of capitals in POST /api/observe held the server 8 s, 400k 39 s.
    words = _CountingWords(privacy_names._CREDENTIAL_WORDS)
    monkeypatch.setattr(privacy_names, "_CREDENTIAL_WORDS", words)
    for length in (1_000, 20_000):
        _CountingWords.lookups = 0
        assert not privacy_names.credential_key("A" * length)
        assert _CountingWords.lookups <= 2 * privacy_names._LONGEST_CREDENTIAL_WORD
    assert privacy_names.credential_key("A" * 20_000 + "TOKEN")


def test_a_megabyte_key_is_judged_at_once() -> None:
    # A key of capitals was quadratic (a megabyte: minutes); now its cost is one pass over it.
    for key in ("A" * 1_000_000, "A" * 999_995 + "TOKEN"):
        started = time.thread_time()
        privacy_names.credential_key(key)
        assert time.thread_time() - started < 0.05
    for key in ("A" * 1_000_000, "A" * 999_995 + "TOKEN", "Ab" * 500_000):
        for judge in (sanitize_json, redact_json):
            started = time.thread_time()
            judge({key: "hunter22"})
            assert time.thread_time() - started < 1.0


def test_long_keys_are_not_kept_in_the_key_cache() -> None:
    before = privacy_engine._credential_key_cache.cache_info().currsize
    for n in range(3):
        redact_json({"K" * 1000 + str(n): "v"})
    assert privacy_engine._credential_key_cache.cache_info().currsize == before


# Credentials under names that privacy18 took for Helm references and kept, in every form that
# was redacted before privacy18 (a `.env` line, `export`, YAML, JSON text, a JSON object).
REFERENCE_LOOKALIKES = [
    ("PASSWORD_SECRET", "hunter-two-pass", ("env", "export", "yaml", "jsontext", "json")),
    ("TOKEN_SECRET_KEY", "letmein", ("env", "export", "json")),
    ("PASSWORD_SECRET_KEY", "password", ("env", "export", "json")),
    ("CREDENTIAL_SECRET_KEY", "foobarbaz", ("env", "export", "json")),
    ("EXISTING_JWT_SECRET", "my-signing-key", ("env", "export", "yaml", "jsontext", "json")),
    ("existingJwtSecret", "my-signing-key", ("yaml", "jsontext", "json")),
    ("credentials_secret", "top-secret-thing", ("env", "export", "yaml", "jsontext", "json")),
    ("PASSWD_SECRET", "alpha.beta", ("env", "export", "jsontext", "json")),
    ("password_secret", "hunter-two", ("env", "export", "yaml", "jsontext", "json")),
    ("passwordSecret", "hunter-two", ("yaml", "jsontext", "json")),
    ("tokenSecretKey", "hunter-two", ("json",)),
]


@pytest.mark.parametrize(("key", "value", "forms"), REFERENCE_LOOKALIKES)
def test_credentials_under_reference_lookalike_names_stay_redacted(
    key: str, value: str, forms: tuple[str, ...]
) -> None:
    texts = {
        "env": f"{key}={value}\n",
        "export": f"export {key}={value}\n",
        "yaml": f"config:\n  {key}: {value}\n",
        "jsontext": json.dumps({key: value}),
    }
    for form in forms:
        if form == "json":
            assert sanitize_json({"c": {key: value}}) == {"c": {key: REDACTED}}
            assert redact_json({"c": {key: value}}) == {"c": {key: REDACTED}}
        else:
            assert value not in redact_secrets(texts[form]), form


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pad_token", "ghp_realtokenhere1234"),
        ("mask_token", "hunter2"),
        ("unk_token", "correct horse"),
        ("eos_token", "s3cr3t<>"),
        ("progress_token", "Hunter2-Real"),
        ("progressToken", "hunter22"),
        ("progressToken", "Zm9vYmFyYmF6cXV4"),
    ],
)
def test_special_token_names_with_a_credential_value_are_redacted(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: REDACTED}
    assert redact_json({key: value}) == {key: REDACTED}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pad_token", "<|pad|>"),
        ("unk_token", "▁unk"),
        ("progressToken", "42"),
        ("progress_token", "task_7"),
    ],
)
def test_special_tokens_and_progress_ids_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hasPassword", "true"),
        ("showPassword", "yes"),
        ("isSecret", "no"),
        ("has_password", "False"),
        ("usePassword", "0"),
        ("requireToken", "null"),
    ],
)
def test_flags_about_a_credential_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


@pytest.mark.parametrize(
    ("key", "value"),
    [("hasPassword", "hunter22"), ("password", "true"), ("isSecret", "yes-please"), ("token", "1")],
)
def test_credentials_that_are_no_flag_stay_redacted(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: REDACTED}
    assert redact_json({key: value}) == {key: REDACTED}


# --- credential names the text rules missed (privacy19) -----------------------------------------

# Each was stored as sent before privacy19: a key named `...Key` but not `apiKey`, a passphrase,
# a short password name (`DB_PASS`, `pwd`), or an API key header in the middle of a line.
NAMED_CREDENTIALS = [
    ("secretKey: minio123", "secretKey: @"),
    ("  secretKey: minio-secret-1", "  secretKey: @"),
    ("privateKey: abc123def456", "privateKey: @"),
    ("APIKey: k3y-0123", "APIKey: @"),
    ("authKey: abc123", "authKey: @"),
    ("signingKey: s1gn-me", "signingKey: @"),
    ("signing_key = abc123==", "signing_key = @"),
    ('"secretKey": "minio123"', '"secretKey": "@"'),
    ('"privateKey": "abc12345"', '"privateKey": "@"'),
    ('"authKey": "abc12345"', '"authKey": "@"'),
    ('"signingKey": "abc12345"', '"signingKey": "@"'),
    ('"X-API-Key": "abcd1234efgh"', '"X-API-Key": "@"'),
    ("X-API-Key: abcd1234efgh", "X-API-Key: @"),
    ('curl -H "X-API-Key: abcd1234efgh" https://x', 'curl -H "X-API-Key: @" https://x'),
    ("curl -H 'x-api-key: abcd1234efgh' https://x", "curl -H 'x-api-key: @' https://x"),
    ("curl -H 'Api-Key: abcd1234efgh' -d '{}' x", "curl -H 'Api-Key: @' -d '{}' x"),
    ('-H "X-Auth-Token: abcd1234efgh" -X GET', '-H "X-Auth-Token: @" -X GET'),
    ("passphrase: correct-horse-9", "passphrase: @"),
    ("ssh_passphrase = s3cret!", "ssh_passphrase = @"),
    ('"passphrase": "correcthorse"', '"passphrase": "@"'),
    ("PASSPHRASE=correcthorse", "PASSPHRASE=@"),
    ("DB_PASS=hunter2", "DB_PASS=@"),
    ("DB_PASS=123456 ./run", "DB_PASS=@ ./run"),
    ("DB_PASS: hunter2", "DB_PASS: @"),
    ("  smtp_pass: hunter2", "  smtp_pass: @"),
    ('"DB_PASS": "hunter22"', '"DB_PASS": "@"'),
    ("pwd: hunter2", "pwd: @"),
    ('pwd = "hunter2"', 'pwd = "@"'),
    ('"pwd": "hunter22"', '"pwd": "@"'),
    # Redacted before privacy19 too; they must stay so.
    ("PGPASSWORD=hunter2 psql -h db", "PGPASSWORD=@ psql -h db"),
    ("MYSQL_PWD=hunter2", "MYSQL_PWD=@"),
    ('curl -H "Authorization: Basic dXNlcjpwYXNz" x', 'curl -H "Authorization: Basic @" x'),
    ("Authorization: Bearer abcdefgh1234", "Authorization: Bearer @"),
]


@pytest.mark.parametrize(("text", "expected"), NAMED_CREDENTIALS)
def test_more_credential_names_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


# Code and configuration naming those credentials without holding one: attribute paths, type
# annotations, references, paths to a key's file, a working directory, a header's
# documentation.
@pytest.mark.parametrize(
    "text",
    [
        "secret_key = settings.secret_key",
        "secretKey: string",
        "  apiKey: string;",
        "apiKey?: string",
        "privateKey: PrivateKey",
        "password: str",
        "signing_key: bytes | None = None",
        "passphrase: Optional[str] = None",
        "privateKey: ./certs/key.pem",
        "signingKey: /etc/keys/signing.pem",
        "private_key: ~/.ssh/id_ed25519",
        "authKey: ${AUTH_KEY}",
        "pwd: /home/dev/project",
        "pwd = os.getcwd()",
        "OLDPWD=/home/dev",
        "bypass: 42",
        "# with current DEFAULT_LAST_PASS = 2 each function",
        "FIRST_PASS=1",
        "X-API-Key: <your key>",
        "X-API-Key: $API_KEY",
        "the X-API-Key: header carries it",
        "cache-key: node-modules",
        "primaryKey: id",
        "publicKey: abc123",
    ],
)
def test_more_credential_names_leave_code_alone(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


@pytest.mark.parametrize(
    "key", ["passphrase", "authKey", "signingKey", "DB_PASS", "PGPASSWORD", "MYSQL_PWD", "pwd"]
)
def test_json_values_of_more_credential_names_are_redacted(key: str) -> None:
    assert sanitize_json({key: "hunter22"}) == {key: REDACTED}
    assert redact_json({key: "hunter22"}) == {key: REDACTED}


@pytest.mark.parametrize(
    ("key", "value"),
    [("pwd", "/home/dev/project"), ("PWD", "/srv/app"), ("OLDPWD", "/tmp"), ("bypass", "x1")],
)
def test_json_working_directories_and_lookalikes_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


# A value starting `/`, `./`, `../` or `~/` is no path under a credential's name: one base64
# secret in 64 starts `/`, and `/9j/` starts every base64 JPEG. A path is kept only where the
# name expects one: a key's file (`privateKey`, `signingKey`), a working directory (`pwd`).
@pytest.mark.parametrize(
    "text",
    [
        '"password": "/x9kLmnP0abc"',
        'password = "/Tr0ub4dor&3"',
        "'token': '/AbCdEf123456789'",
        "secret: /9j/4AAQSkZJRgABAQAAAQABAAD",
        "token: /AbCdEf123456789",
        "api_key: /AbCdEf123456789",
        '"client_secret": "/9j/4AAQSkZJRgABAQAAAQABAAD"',
        "client_secret: ~/x9Kz",
        "password: ../x9Kz",
        "secretKey: /9j/4AAQSkZJRgABAQAAAQABAAD",
        "signingKey: //9j4AAQSkZJRgABAQAAAQABAAD",
        "privateKey: /9j/4AAQSkZJRgABAQAAAQABAAD",
        'pwd = "/x9kLmnP0abc$"',
        "MYSQL_PWD=/x9kLmnP0abc",
    ],
)
def test_a_secret_starting_like_a_path_is_redacted(text: str) -> None:
    secret = re.split(r"[:=]\s*", text, maxsplit=1)[1].strip("\"'")
    for judged in (redact_secrets(text), redact_secrets_lines(text)):
        assert REDACTED in judged
        assert secret not in judged


@pytest.mark.parametrize(
    "text",
    [
        "privateKey: ~/.ssh/id_ed25519",
        "signingKey: ./keys/sign.pem",
        'signingKey: "./keys/sign.pem"',
        '"privateKey": "/etc/ssl/private/server.key"',
        "pwd: ~/src",
        "BUILD_PWD=/home/user/src",
    ],
)
def test_a_path_where_the_name_expects_one_is_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets_lines(text) == text


# `pwd` alone holds a directory in a tool's dump; `MYSQL_PWD`, `dbPwd` hold a password, and a
# directory is a path's shape, not `/` or `~` before anything.
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pwd", "/x9kLmnP0abc$"),
        ("pwd", "~hunter2"),
        ("pwd", "/x9kLmnP0abc"),
        ("pwd", "//9j4AAQSkZJRgABAQAAAQABAAD"),
        ("MYSQL_PWD", "/x9kLmnP0abc"),
        ("dbPwd", "/x9kLmnP0abc"),
        ("dbPwd", "/hunter2"),
        ("password", "/home/dev/project"),
        ("privateKey", "/9j/4AAQSkZJRgABAQAAAQABAAD"),
    ],
)
def test_json_a_secret_starting_like_a_directory_is_redacted(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: REDACTED}
    assert redact_json({key: value}) == {key: REDACTED}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pwd", "~"),
        ("pwd", "~/src"),
        ("pwd", "C:\\Users\\dev"),
        ("privateKey", "~/.ssh/id_ed25519"),
        ("signing_key", "./keys/sign.pem"),
    ],
)
def test_json_paths_where_the_name_expects_one_are_kept(key: str, value: str) -> None:
    assert sanitize_json({key: value}) == {key: value}
    assert redact_json({key: value}) == {key: value}


# A header's or a key's documentation: a plain word, a placeholder, an algorithm's name.
@pytest.mark.parametrize(
    "text",
    [
        "X-API-Key: required",
        "| X-API-Key: required | string |",
        "x-api-key: optional",
        "X-API-Key: YOUR_API_KEY",
        "curl -H 'X-API-Key: your-api-key-here' https://api.example.com",
        "curl -H 'X-Auth-Token: xxxxxxxxxxxx' https://api.example.com",
        "X-API-Key: xxxxxxxxxxxx",
        "Header X-API-Key: ApiKeyAuth",
        "signing_key: HS256/RS256",
        "signingKey: RS256",
        "hash_pass: sha256",
    ],
)
def test_documentation_of_a_key_keeps_its_words(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets_lines(text) == text


@pytest.mark.parametrize(
    "text",
    ["X-API-Key: a1b2c3d4e5f6", "curl -H 'x-api-key: sk_live_9f8e7d6c'", "signing_key: HS256x9kQ"],
)
def test_a_header_holding_a_key_is_still_redacted(text: str) -> None:
    assert REDACTED in redact_secrets(text)


@pytest.mark.parametrize(
    "value", [{"optimization_pass": "dce-v2"}, {"last_pass": "2"}, {"FIRST_PASS": "1"}]
)
def test_json_a_compiler_pass_is_kept(value: dict[str, Any]) -> None:
    assert sanitize_json(value) == value
    assert redact_json(value) == value


# A list under a credential's plural name holds credentials: each string element is redacted.
@pytest.mark.parametrize(
    "key",
    ["apiKeys", "api_keys", "passwords", "secrets", "accessTokens", "refresh_tokens", "API_KEYS"],
)
def test_json_lists_under_credential_plurals_are_redacted(key: str) -> None:
    value = {key: ["k1", "k2", 3, {"name": "x"}]}
    expected = {key: [REDACTED, REDACTED, 3, {"name": "x"}]}
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"tokens": ["Hello", ",", "world", "!"]},
        {"stop_tokens": ["</s>", "###", "\n\nUser:"]},
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]},
        {"extra_tokens": ["<|reserved_special_token_250|>", "internationalization"]},
        {"tokens": 12, "max_tokens": 4096},
        {"keys": ["a", "b"], "publicKeys": ["ssh-ed25519 AAAA"]},
        {"secretNames": ["db-secret"]},
    ],
)
def test_json_lists_that_are_no_credentials_are_kept(value: dict[str, Any]) -> None:
    assert sanitize_json(value) == value
    assert redact_json(value) == value


def test_json_tokens_of_a_credentials_shape_are_redacted() -> None:
    # A bare `tokens` list is a tokenizer's output as often as credentials: only elements of a
    # credential's shape (16 or more characters, no space, a digit) are redacted.
    value = {"tokens": ["Hello", "a1B2c3D4e5F6g7H8i9"], "stopTokens": ["x9Y8z7W6v5U4t3S2"]}
    expected = {"tokens": ["Hello", REDACTED], "stopTokens": [REDACTED]}
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected


def _seconds(run: Callable[[], object], *, enough: float = 0.0) -> float:
    """The best of two runs' CPU time in this thread: the time a loaded machine keeps the
    thread waiting for a CPU is no work of the run's. The second run is skipped when the first
    took less than `enough`: the best of two would be too."""
    times = []
    for _ in range(2):
        started = time.thread_time()
        run()
        times.append(time.thread_time() - started)
        if times[-1] < enough:
            break
    return min(times)


def test_the_timing_helper_counts_this_threads_cpu_not_the_wall() -> None:
    # A run descheduled by a loaded machine (a CI run: 25 ms for a quarter, 280 ms for the
    # whole) waited, as a sleep does: it did no more work, and must not fail a linearity bound.
    assert _seconds(lambda: time.sleep(0.05)) < 0.01


def _assert_linear(run: Callable[[int], object]) -> None:
    """`run(n)` costs work linear in n: a quarter megabyte's input takes less than 8 times a
    sixteenth's (linear is 4 times, quadratic 16), plus 50 ms for caches' and the allocator's
    noise. A ratio of CPU times, not a wall-clock bound: the machine's speed and its load cancel
    out (speed claims are bench/'s). A quarter megabyte, not a megabyte, which cost the suite
    ~55 s of CPU: a rule rescanning from every 16th character fails at this size, as the
    per-character rescans these tests were written for do (docs/benchmarks.md, suite22)."""
    quarter = _seconds(lambda: run(1))
    # Whether the best of two wholes is under the bound is known after the first that is: a
    # linear run's second whole (two fifths of the test's time) would decide nothing.
    bound = 8 * quarter + 0.05
    whole = _seconds(lambda: run(4), enough=bound)
    assert whole < bound, (quarter, whole)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "secretKey: " + "a1" * 31_250 * n,
        lambda n: "X-API-Key: " * 6_250 * n,
        lambda n: "x-api-key:" + " " * 62_500 * n + "x",
        lambda n: "X-Auth-Token:" + " " * 62_500 * n,
        lambda n: "DB_PASS" * 9_375 * n,
        lambda n: "pwd" * 18_750 * n + ": x1",
        lambda n: "passphrase: " + "a" * 62_500 * n,
        lambda n: '"signingKey": "' + "a1" * 31_250 * n,
        lambda n: "a_" * 31_250 * n + "pass: x1",
        lambda n: "DB_PASSWORD=hunter2\n" * 3_250 * n,
        lambda n: "privateKey: /" + "a/" * 31_250 * n,
    ],
)
def test_the_new_names_cost_linear_work_on_a_quarter_megabyte(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))


def test_plural_credential_keys_cost_linear_work_on_a_quarter_megabyte() -> None:
    keys = (
        lambda n: "A" * (62_500 * n - 1) + "S",
        lambda n: "Ab" * 31_250 * n + "Tokens",
        lambda n: "a_" * 31_250 * n + "passwords",
    )
    for key in keys:
        for judge in (sanitize_json, redact_json):
            _assert_linear(lambda n, key=key, judge=judge: judge({key(n): ["hunter22"] * 10}))


# --- plain-word credentials in text, lists in text, a compiler's pass (privacy20) ---------------

# A password is often a plain word: each was stored as sent before privacy20 (a value needed a
# digit or a symbol), though the same value in a JSON object was redacted.
PLAIN_WORD_CREDENTIALS = [
    ("apiKey: swordfish", "apiKey: @"),
    ("password: swordfish", "password: @"),
    ("secret=letmein", "secret=@"),
    ("DB_PASSWORD=hunter", "DB_PASSWORD=@"),
    ("db_password=Letmein", "db_password=@"),
    ("client_secret: swordfish", "client_secret: @"),
    ("passphrase: correcthorsebatterystaple", "passphrase: @"),
    ("MYSQL_PWD: swordfish", "MYSQL_PWD: @"),
    ("auth_token: swordfish  # the bot's", "auth_token: @  # the bot's"),
    # A default password that works wherever nobody changed it.
    ("password: changeme", "password: @"),
    ("--password swordfish", "--password @"),
    ("twine upload --password swordfish dist/*", "twine upload --password @ dist/*"),
    ("kubectl --token swordfish get pods", "kubectl --token @ get pods"),
    ("--api-key 'swordfish' --verbose", "--api-key '@' --verbose"),
    ('--client-secret "two words"', '--client-secret "@"'),
    ("--secret-access-key abc/def+ghi", "--secret-access-key @"),
    ("--token=swordfish", "--token=@"),
    ("--password hunter2", "--password @"),
    ("--api_token x1abc", "--api_token @"),
    ("cli --client_secret=swordfish --verbose", "cli --client_secret=@ --verbose"),
    ('log: {"secret": "letmein"}', 'log: {"secret": "@"}'),
]


@pytest.mark.parametrize(("text", "expected"), PLAIN_WORD_CREDENTIALS)
def test_plain_word_credentials_in_text_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


# Documentation words, placeholders, types, identifiers and prose under a credential's name.
@pytest.mark.parametrize(
    "text",
    [
        "password: required",
        "api_key: Optional",
        "token: null",
        "token = false",
        "secret: none",
        "password: empty",
        "password: <your password>",
        "password: ${DB_PASSWORD}",
        "password: $DB_PASSWORD",
        "password: %(db_password)s",
        "password: ****",
        "password: xxxx",
        "password: XXXXXXXX",
        "password: str",
        "apiKey: string",
        "token: Token",
        "password: password",
        "self.secret = secret",
        "    password = passphrase",
        "--container-registry-password requires --container-registry-username.",
        "password: PASSWORD",
        "password: your_password",
        "token: accessToken",
        "eos_token: eos",
        "last_pass: done",
        "optimization_pass: dce-v2",
        "  optimization_pass: dce-v2",
        "OPTIMIZATION_PASS=dce-v2",
        "--password PASSWORD",
        "--token string   the token to use",
        "--password <pw>",
        "--password $PW",
        "--password ${PW}",
        "--password --user x",
        "--password is required",
        "pass the --token flag to login",
        "--password-file /run/secrets/pw",
        "--no-password mydb",
        "--no_password mydb",
        "--key value",
        "--max-tokens 4096",
        "--private-key ~/.ssh/id_ed25519",
        "--next-token 2",
        "x--token abc1",
    ],
)
def test_placeholders_under_credential_names_in_text_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


# Code and status lines under a credential's name that rules generation 5 redacted as it first
# stood (rev-privacy20; pygments' lexers alone held 28 `token = Error`-like lines): the worker's
# rescan would have rewritten every stored row holding one. An assignment spaced as code (` = `)
# whose value is a word is an identifier's; a capitalised word after `:` is a type or a kind
# (`token: Name`, Kubernetes' `Opaque`); a status word is a result, not a password. The price:
# `password = swordfish` spaced as code, or `password: Swordfish`, is kept.
@pytest.mark.parametrize(
    "text",
    [
        "self._token = value",
        "        self._api_key = value",
        "password = getpass",
        "token = Error",
        "    token = Punctuation",
        "token = response",
        "type_annotation_token = Name",
        "token: Name",
        "token: expired",
        "password: incorrect",
        "secret: Opaque",
        "token: invalid",
        "password: denied",
        "token=revoked",
        "api_key: missing",
        "  db_password = letmein",
        "client_secret: Swordfish",
    ],
)
def test_code_and_status_words_under_credential_names_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


# A value masked already holds no credential, in JSON as in text (`known_value`); a mask is one
# character repeated: `xXxXxXxX` mixes cases as a password may, and is redacted.
@pytest.mark.parametrize("masked", ["****", "xxx", "XXXXXXXX", "********************"])
def test_masked_values_are_kept_in_json(masked: str) -> None:
    for value in ({"password": masked}, {"apiKeys": [masked]}, {"db": {"client_secret": masked}}):
        assert sanitize_json(value) == value
        assert redact_json(value) == value


def test_a_run_of_mixed_case_xs_is_no_mask() -> None:
    assert sanitize_json({"password": "xXxXxXxX"}) == {"password": REDACTED}
    assert redact_json({"password": "xXxXxXxX"}) == {"password": REDACTED}
    assert redact_secrets('"password": "xXxXxXxX"') == f'"password": "{REDACTED}"'
    # Unquoted, a plain word of mixed case is an identifier's shape (`plain_credential`).
    assert redact_secrets("--password xXxXxXxX") == "--password xXxXxXxX"


# The JSON rule keeps a compiler's pass; the text rules now agree with it.
def test_a_compiler_pass_is_kept_in_text_and_json_alike() -> None:
    assert redact_secrets("optimization_pass: dce-v2") == "optimization_pass: dce-v2"
    assert sanitize_json({"optimization_pass": "dce-v2"}) == {"optimization_pass": "dce-v2"}
    assert redact_secrets("db_pass: dce-v2") == f"db_pass: {REDACTED}"
    assert sanitize_json({"db_pass": "dce-v2"}) == {"db_pass": REDACTED}


# A JSON list under a credential's plural inside text (a log line, a shell's output, a Python
# repr): each element as the JSON rule judges it in an object.
TEXT_LISTS = [
    ('x "apiKeys": ["k1", "k2"] y', 'x "apiKeys": ["@", "@"] y'),
    ('{"passwords":["swordfish","letmein"]}', '{"passwords":["@","@"]}'),
    ("{'api_keys': ['k1abc', 'k2abc']}", "{'api_keys': ['@', '@']}"),
    ('"refresh_tokens": [\n  "r1",\n  "r2"\n]', '"refresh_tokens": [\n  "@",\n  "@"\n]'),
    ('"secrets": ["a\\"b", 3, null, ""]', '"secrets": ["@", 3, null, ""]'),
    ('"tokens": ["Hello", "a1B2c3D4e5F6g7H8i9"]', '"tokens": ["Hello", "@"]'),
    ('"credentials": ["x1"], "name": "y"', '"credentials": ["@"], "name": "y"'),
    # A trailing comma, as JavaScript, Python and JSON5 allow (fixprivacy20).
    ('"apiKeys": [\n "k1abc",\n "k2abc",\n]', '"apiKeys": [\n "@",\n "@",\n]'),
    ("{'api_keys': ['k1abc', 'k2abc' , ]}", "{'api_keys': ['@', '@' , ]}"),
]


@pytest.mark.parametrize(("text", "expected"), TEXT_LISTS)
def test_lists_under_credential_plurals_in_text_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected, lines=False)


@pytest.mark.parametrize(
    "text",
    [
        '"stop_tokens": ["</s>", "###"]',
        '"keys": ["a", "b"]',
        '"secretNames": ["db-secret"]',
        '"apiKeys": []',
        '"tokens": ["Hello", ",", "world"]',
        '"additional_special_tokens": ["<|im_start|>"]',
        '"apiKeys": [{"name": "x"}]',
        '"next_tokens": ["2", "3"]',
    ],
)
def test_lists_in_text_that_are_no_credentials_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


@pytest.mark.parametrize(
    "make",
    [
        lambda n: '"apiKeys": [' + '"k1", ' * 31_250 * n + '"k2"]',
        lambda n: '"apiKeys": [' + '"k1", ' * 31_250 * n,
        lambda n: '"apiKeys": ["k1", ' * 15_000 * n,
        lambda n: '"keys": [' + "'s\": [', " * 20_000 * n,
        lambda n: '"apiKeys": [' + " " * 62_500 * n,
        lambda n: '"apiKeys": ["' + "a" * 62_500 * n,
        lambda n: "--token " * 31_250 * n,
        lambda n: "-" * 62_500 * n + "token x1",
        lambda n: "--a" * 62_500 * n + "-token x1",
        lambda n: "password: " + "a" * 62_500 * n,
        lambda n: '"apiKeys": [' + '"k1", ' * 31_250 * n + "]",
        lambda n: '"apiKeys": [' + '"k1",' * 31_250 * n + " ,",
        lambda n: "--a_b" * 50_000 * n + "_token x1",
    ],
)
def test_the_privacy20_rules_cost_linear_work_on_a_quarter_megabyte(
    make: Callable[[int], str],
) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_redact_json_text_redacts_each_string_as_redact_json_does(
    separators: tuple[str, str],
) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    value = {
        f'k\\e"y {token}': [f'say \\"é\n {token}', "", 1.5, None, {"password": "hunter2hunter2"}],
        "api_key": "",
        "token": ["not whole", {"secret": f"x {token}"}],
        "auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpodW50ZXIyaHVudGVyMg=="}},
        "plain": "password: hunter2",
        "n": [{"password": 3}, "after"],
        # A credential's plural: each string element whole, a nested one as anywhere else.
        "passwords": ["hunter2hunter2", "", 7, ["hunter3hunter3"], {"k": "v"}, "correct horse"],
        "apiKeys": [["x"], "sk-abcdefabcdefabcdef"],
        "list": ["passwords", ["a", "b"]],
    }
    for ascii_only in (True, False):
        text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
        redacted = redact_json_text(text)
        assert json.loads(redacted) == redact_json(value)
        assert token not in redacted
    clean = json.dumps({"a": [1.50, "kept as written"]}, separators=separators)
    assert redact_json_text(clean) is clean
    deep = "[" * 5000 + '{"passwords": ["hunter2hunter2", [[]], "kept?"]}' + "]" * 5000
    assert redact_json_text(deep) == deep.replace("hunter2hunter2", REDACTED).replace(
        "kept?", REDACTED
    )
