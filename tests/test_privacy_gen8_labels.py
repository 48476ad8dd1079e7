"""A password's label in another language is kept, a passphrase of that language's common words
is not (fixprivacy23). Generation 8's label words held function words, verbs and adjectives
(`una`, `sie`, `das`, `por`, `lagi`): a diceware passphrase holding one stayed in clear."""

from __future__ import annotations

import pytest

from app.privacy import redact_secrets


@pytest.mark.parametrize(
    "value",
    [
        "nova senha aqui",
        "kata sandi baru",
        "mot de passe",
        "neues passwort eingeben",
        "uusi salasana",
    ],
)
def test_a_label_naming_the_password_in_another_language_is_kept(value: str) -> None:
    text = f'password: "{value}"'
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    "value",
    [
        "una casa roja grande",
        "die katze sie schlaeft",
        "das haus ein baum",
        "por favor casa verde",
        "une maison bleue ancien",
        "kucing makan lagi siang",
        "nye hus gammel bil",
    ],
)
def test_a_passphrase_of_common_words_in_another_language_is_redacted(value: str) -> None:
    assert redact_secrets(f'password: "{value}"') == 'password: "[REDACTED]"'
