"""Locale strings and descriptions generation 7 took for passphrases (privacy23): a password's
label in another language (`"kata sandi baru"`, Indonesian for "new password") and a list of
hashing algorithms are kept under a credential's name; passphrases of English words are still
redacted, an English word that some language's label holds too (`stare`, `nova`) among them."""

from __future__ import annotations

import pytest

from app.privacy import redact_secrets, redact_secrets_lines
from app.textscan import SHORT_TEXT
from tests.test_privacy import assert_redacted_on_every_path

KEPT = [
    # Labels of a password in other languages, lower-cased, under a credential's name.
    'password: "kata sandi baru"',
    'new_password: "nova senha aqui"',
    '"password": "masukkan kata sandi"',
    'old_password: "eski parola tekrar"',
    "passphrase: 'uusi salasana uudelleen'",
    '"confirmPassword": "wachtwoord opnieuw invoeren"',
    'password = "gammelt passord her"',
    '"password": ["kata sandi baru"]',
    # A description of how a credential is hashed: algorithms' names, as a lone one is kept.
    'password: "argon bcrypt scrypt"',
    'secret: "hmac with bcrypt"',
    'password_hash: "pbkdf sha256 bcrypt"',
]


@pytest.mark.parametrize("text", KEPT)
def test_labels_and_descriptions_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


REDACTED = [
    ('password: "correct horse battery"', 'password: "@"'),
    ('"password": "correct horse battery staple"', '"password": "@"'),
    # A word some language's label holds that English has too is an English passphrase's word.
    ('password: "stare horse battery"', 'password: "@"'),
    ('password: "nova horse battery"', 'password: "@"'),
    ('api_key: "focal point orange"', 'api_key: "@"'),
]


@pytest.mark.parametrize(("text", "expected"), REDACTED)
def test_passphrases_are_still_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)
