"""Credentials recognised by their name: `.env` and config assignments, quoted values of
credential-named keys, connection-string passwords, registry and Docker config credentials."""

from __future__ import annotations

import base64
import re
from functools import lru_cache

from app.privacy.common import _NOT_A_REFERENCE, _NOT_REDACTED, REDACTED, _keep_group, _Rule


def basic_credentials(value: str) -> bool:
    """Whether `value` is the base64 of `user:password`, as HTTP Basic and Docker's `auth` hold."""
    try:
        return b":" in base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error is one
        return False


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
    return f"{match.group('name')}{match.group('sep')}{prefix}{quote}{REDACTED}{quote}"


# A name that ends in a credential's word but may name no credential: a Helm chart's
# `existingSecret` is the name of the Kubernetes Secret holding one (so are
# `existingPasswordSecret`, `existingAdminSecret`), `passwordSecretKey` names the key in that Secret
# which holds it, and `next_token`, `nextPageToken`, `ContinuationToken` are pagination cursors (the
# page after this one). The qualifier must start the name (or follow the `.` of a dotted key): after
# a prefix, `FB_PAGE_TOKEN`, `REPO_SYNC_TOKEN`, `fbPageToken` are a service's tokens and
# `appPasswordSecret` an app's secret. A Secret's key may follow a prefix
# (`adminPasswordSecretKey`): what qualifies it is the word before `SecretKey`, without which
# `jwtSecretKey` is a credential. Only the charts' own shapes qualify: `existingJwtSecret`,
# `passwordSecret`, `credentialsSecret`, `tokenSecretKey` are applications' credentials as often as
# references, and so is every name in capitals but `EXISTING_SECRET` (`PASSWORD_SECRET_KEY`,
# `EXISTING_ADMIN_SECRET`: an environment's variables, which charts' values are not; see
# `reference`). The name alone decides nothing (`RESUME_TOKEN=Zm9v...`, `existingSecret: s3cr3tP@ss`
# are credentials): the value must also have the shape of what the name says.
_REFERENCE_NAME = re.compile(
    r"(?:(?<![\w\-])"
    r"(?:(?P<secret>(?i:existing)[_\-]?(?i:secret))"
    r"|(?P<chart>(?i:existing)[_\-]?(?i:password|passwd|admin|auth|user)[_\-]?(?i:secret))"
    r"|(?i:next|prev|previous|page|continuation|continue|cursor|sync|resume|start|starting)"
    r"[_\-]?(?:(?i:page|sync)[_\-]?)?(?i:token))"
    r"|(?P<key>(?i:existing|password|passwd)[_\-]?(?i:secret)[_\-]?(?i:key)))\Z"
)
# Longer than any name `_REFERENCE_NAME` matches (`continuation_sync_token`,
# `existing-password-secret-key`).
_REFERENCE_NAME_CHARS = 64
# A Kubernetes Secret's name as charts spell them: lowercase words or numbers, two or more,
# joined by `-` or `.` (`my-db-secret`, `redis-2`). A part mixing letters and digits
# (`hunter2-real-pa55`), a capital or a symbol is a password's shape, and is redacted.
_SECRET_NAME_VALUE = re.compile(r"(?:[a-z]+|[0-9]+)(?:[-.](?:[a-z]+|[0-9]+))+")
# A key of a Secret's data as charts spell them: lowercase words joined by `-`, `_` or `.`
# (`postgres-password`, `tls.key`), or one of the charts' default keys alone (`password`); any
# other single word (`letmein`) is a password's shape.
_SECRET_KEY_VALUE = re.compile(
    r"[a-z]+(?:[-_.][a-z]+)+|password|passwd|token|secret|key|auth|credentials?"
)
# A cursor that cannot be a credential: a page number or offset, or a short word with a page
# number (`page2`, `page-2`, `CAIQAA`). An opaque cursor (base64, hex, 10+ mixed characters)
# cannot be told from a token by its shape, so it is redacted: that costs a cursor, a leak
# costs a credential.
_CURSOR_VALUE = re.compile(r"[0-9]{1,10}|[A-Za-z]{1,8}(?:[-_]?[0-9]{1,4})?")


def _cursor_name(name: str) -> bool:
    """Whether `name` is a pagination cursor's (`pageToken`, `next_page_token`; see
    `_REFERENCE_NAME`)."""
    found = _REFERENCE_NAME.search(name, max(0, len(name) - _REFERENCE_NAME_CHARS))
    return found is not None and not (
        found.group("secret") or found.group("chart") or found.group("key")
    )


def reference(name: str, value: str) -> bool:
    """Whether `value`, under a key named like a credential, is a secret's name, a key in a
    secret, or a cursor (see above) rather than a credential."""
    # A match ends the name and is a few words long: searched for in its end only, so that
    # judging each element of a list under a megabyte's key is not a megabyte's search each.
    found = _REFERENCE_NAME.search(name, max(0, len(name) - _REFERENCE_NAME_CHARS))
    if found is None:
        return False
    if found.group("chart") or found.group("key"):
        if not any(char.islower() for char in found.group()):
            return False
        shape = _SECRET_KEY_VALUE if found.group("key") else _SECRET_NAME_VALUE
    elif found.group("secret"):
        shape = _SECRET_NAME_VALUE
    else:
        shape = _CURSOR_VALUE
    return shape.fullmatch(value) is not None


# A key's words: camelCase and PascalCase split (`githubToken`, `AuthToken`), an acronym a word of
# its own before a capitalised one (`APIKey`: `API`, `Key`), and every other character a break
# (`x-api-key`, `DB_PASSWORD`, `github.token`).
_KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# What a credential-named key's last words spell, in lower case. Only whole words count
# (`maxTokens`, `tokenizer`, `token_budget`, `secretName`, `monkey`, `publicKey` name none);
# the glued ones are spelled as one word too (`accesstoken`, `apikey`).
_CREDENTIAL_WORDS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "credential",
        "credentials",
        "apikey",
        "secretkey",
        "privatekey",
        "secretaccesskey",
        "accesstoken",
        "authtoken",
        "refreshtoken",
        "clientsecret",
        "passphrase",
        "authkey",
        "signingkey",
    }
)
# Short names of a password that are other words' parts (`bypass`, `compass`, `OLDPWD`): only as
# a key's whole last word, and `pass` only after another word (`DB_PASS`, `smtpPass`; a lone
# `pass` is a test's count or a verdict as often).
_SHORT_CREDENTIAL_WORDS = frozenset({"pwd", "pass"})
_LONGEST_CREDENTIAL_WORD = max(map(len, _CREDENTIAL_WORDS))
# Tokens that the word before them may make no credential: a tokenizer's special tokens
# (`"unk_token": "<unk>"`, `eos_token`) and an MCP request's `progressToken`; which they are
# the value tells (see `known_value`).
_NOT_CREDENTIAL_TOKENS = frozenset(
    {"unk", "pad", "bos", "eos", "sep", "cls", "mask", "special", "progress"}
)
# A tokenizer's special token: `<unk>`, `</s>`, `<|endoftext|>`, `[PAD]`, a SentencePiece `▁x`.
_SPECIAL_TOKEN_VALUE = re.compile(
    r"<\|[\w.:\-]{1,40}\|>|</?[\w.:\-]{1,40}>|\[[\w.:\-]{1,40}\]|▁\S{0,40}"
)
# An MCP progress token as clients make them: a number or a word and a number (`42`, `req-17`);
# a password-shaped word (`hunter22`) or an opaque string could be a credential, and is redacted.
_PROGRESS_VALUE = re.compile(r"[0-9]{1,10}|[A-Za-z]{1,16}[-_][0-9]{1,10}")
# `hasPassword: "true"`, `showPassword: "no"`, `isSecret: "0"` say whether there is one: only a
# flag's value under a flag's word is kept (`hasPassword: "hunter22"`, `password: "true"` are
# redacted: a password may be any word).
_FLAG_WORDS = frozenset({"has", "show", "is", "use", "require", "requires"})
_FLAG_VALUES = frozenset({"true", "false", "yes", "no", "on", "off", "0", "1", "null", "none"})
# How much of a key the words above are looked for in: its first and last few words, whatever
# its length.
_KEY_END_CHARS = 40


def credential_key(name: str) -> bool:
    """Whether an object key names a credential: its last words, a number after them aside
    (`password2`), spell one of `_CREDENTIAL_WORDS`. The spelling may also start inside a word
    of capitals, where acronyms run together (`OpenAIAPIKey`: `AIAPI`, `Key`; `GITHUBTOKEN`)."""
    words = _KEY_WORD.findall(name)
    while words and words[-1].isdigit():
        words.pop()
    if words and words[-1].lower() in _SHORT_CREDENTIAL_WORDS:
        if words[-1].lower() == "pwd":
            return True
        return len(words) > 1 and words[-2].lower() not in _NOT_CREDENTIAL_PASSES
    spelled = ""
    for word in reversed(words):
        spelled = word.lower() + spelled
        if spelled in _CREDENTIAL_WORDS:
            return True
        if word.isupper() and len(word) > 1:
            # Where in the acronym the spelling starts is not known: any of its letters that
            # leaves no more than the longest word, so that a long run of capitals costs a few
            # look-ups, not one slice of the rest per letter.
            first = max(1, len(spelled) - _LONGEST_CREDENTIAL_WORD)
            if any(spelled[start:] in _CREDENTIAL_WORDS for start in range(first, len(word))):
                return True
        if len(spelled) >= _LONGEST_CREDENTIAL_WORD:
            return False
    return False


# A path's shape: `/`, `./`, `../`, `~/` or a drive before parts of a file name's characters
# (`/home/dev`, `~/.ssh/id_ed25519`, `C:\\Users\\dev`), or `~` alone. No `$`, `&`, `//`: a
# password's characters.
_PATH_VALUE = re.compile(r"(?:~|\.{1,2})?(?:/[\w.\-@]+)+/?|~/?|[A-Za-z]:(?:[\\/][\w.\- ]+)*[\\/]?")
# A part of a path that is base64's (`/9j/4AAQSkZJRg…`, a JPEG's; `/x9kLmnP0abc`): 8 characters
# or more of base64's alphabet mixing capitals, small letters and digits. A file's or a folder's
# name has a `.`, `_` or `-`, or fewer kinds (`id_ed25519`, `project`, `server.key`).
_BASE64_PART = re.compile(r"(?=[^/]*[0-9])(?=[^/]*[a-z])(?=[^/]*[A-Z])[A-Za-z0-9+=]{8,}")
# A key's file has a file's extension (`sign.pem`, `jwt.key`) or sits in a folder
# (`~/.ssh/id_ed25519`).
_FILE_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,8}\Z")
# The names under which a path is what is expected: a key's file, a working directory. Any other
# credential's name holds the credential, whatever it starts with: a password may start `/`.
_KEY_FILE_WORDS = frozenset({"privatekey", "signingkey"})


def expected_path(name: str, value: str) -> bool:
    """Whether `value`, under a credential-named key `name`, is the path the name expects: a
    private or signing key's file (`privateKey: ~/.ssh/id_ed25519`), or the working directory
    under a lone `pwd` (`/home/dev`, `~`). `MYSQL_PWD`, `dbPwd` hold a password; under them
    only a path of two parts or more (`BUILD_PWD=/home/u/src`) is one. No part may have base64's
    shape: `/9j/4AAQ…` is a JPEG's base64, not a file."""
    # Most values are no path: judged before the name's words are split, as for every
    # `DB_PASSWORD=` of an environment's dump.
    if value[:1] not in ("/", "~", ".") and value[1:2] != ":":
        return False
    words = _KEY_WORD.findall(name[-_KEY_END_CHARS:])
    while words and words[-1].isdigit():
        words.pop()
    if not words:
        return False
    last = words[-1].lower()
    key_file = last in _KEY_FILE_WORDS or (
        last == "key" and len(words) > 1 and words[-2].lower() + last in _KEY_FILE_WORDS
    )
    if not key_file and last != "pwd":
        return False
    path = _PATH_VALUE.fullmatch(value)
    if path is None:
        return False
    parts = [part for part in re.split(r"[\\/]", value) if part not in ("", ".", "..", "~")]
    if any(_BASE64_PART.fullmatch(part) for part in parts):
        return False
    if key_file:
        return len(parts) >= 2 or (bool(parts) and _FILE_EXTENSION.search(parts[-1]) is not None)
    return len(words) == 1 or len(parts) >= 2


# What a signing key's or a hash's setting names rather than holds: an algorithm, or a few of
# them (`signing_key: HS256/RS256`, `hash_pass: sha256`).
_ALGORITHM = (
    r"(?:[HRPE]S(?:256|384|512)|ES256K|EdDSA|Ed25519|Ed448"
    r"|(?i:sha3?-?(?:1|224|256|384|512)|md5|hmac-?sha-?(?:1|256|384|512)"
    r"|bcrypt|scrypt|pbkdf2|argon2(?:id|i|d)?))"
)
_ALGORITHM_VALUE = re.compile(rf"{_ALGORITHM}(?:[/,|] ?{_ALGORITHM})*")
# The words before `pass` that make a compiler's or a renderer's pass of it, not a password
# (`{"optimization_pass": "dce-v2"}`).
_NOT_CREDENTIAL_PASSES = frozenset(
    {"optimization", "optimisation", "compiler", "codegen", "lowering", "render", "shader"}
)
# Up to three digits alone under `pass` are a count (`{"last_pass": "2"}`), as the `.env` rule
# has it for `DEFAULT_LAST_PASS = 2`.
_PASS_COUNT = re.compile(r"[-+]?[0-9]{1,3}")


def algorithm(value: str) -> bool:
    """Whether `value`, under a credential-named key, names algorithms: a signing key's or a
    password hash's setting (`HS256/RS256`, `sha256`), not a credential."""
    return _ALGORITHM_VALUE.fullmatch(value) is not None


def known_value(name: str, value: str) -> bool:
    """Whether `value`, under a credential-named key `name`, is no credential by its shape and
    what the name says: a secret's name, a key in a secret or a cursor (`reference`), a
    tokenizer's special token or a progress id, a working directory under `pwd`, or a flag
    saying whether there is one."""
    if reference(name, value) or _MASKED_VALUE.fullmatch(value):
        return True
    if placeholder(name, value):
        return True
    last = _KEY_WORD.findall(name[-_KEY_END_CHARS:])
    while last and last[-1].isdigit():
        last.pop()
    if expected_path(name, value) or algorithm(value):
        return True
    if last and last[-1].lower() == "pass" and _PASS_COUNT.fullmatch(value):
        return True
    if len(last) > 1 and last[-1].lower() == "token":
        before = last[-2].lower()
        if before == "progress":
            return _PROGRESS_VALUE.fullmatch(value) is not None
        if before in _NOT_CREDENTIAL_TOKENS and _SPECIAL_TOKEN_VALUE.fullmatch(value):
            return True
    first = _KEY_WORD.findall(name[:_KEY_END_CHARS])
    return len(first) > 1 and first[0].lower() in _FLAG_WORDS and value.lower() in _FLAG_VALUES


# A list under a credential's plural name (`apiKeys`, `passwords`, `refresh_tokens`) holds
# credentials. `tokens` alone or after a word that makes no credential of them (`stop_tokens`,
# `extra_tokens`) is a tokenizer's output or settings as often: there only an element of a
# credential's shape, 16 characters or more without a space and with a digit, is redacted
# (`internationalization` is a word; a special token, `<|reserved_special_token_250|>`, is kept
# as under `unk_token`), and so is a random token's of 10 to 15 letters, digits, `_` and `-`
# mixing capitals, small letters and digits (`Xk9qLm2Pz7Rt`, privacy24: generation 9 kept it).
# A tokenizer's piece or a lexer's name holds fewer kinds (`x86_64`, `ISO8601`, `NUMBER`,
# `deadbeef1234`, `XMLHttpRequest`).
_TOKEN_SHAPE = re.compile(
    r"(?=\S*[0-9])\S{16,}|(?=[^a-z]*[a-z])(?=[^A-Z]*[A-Z])(?=[^0-9]*[0-9])[A-Za-z0-9_\-]{10,15}"
)
_SHORT_TOKEN = re.compile(r"[A-Za-z0-9_\-]{10,15}")
# An identifier of that shape is kept (`Uint8Array`, `OAuth2Client`, `toBase64String`: a
# JavaScript tokenizer's output, fixprivacy24): split as a key is (`_KEY_WORD`), its letters
# are words of three letters or more, but for two shorter runs at most holding a quarter of its
# letters, between two numbers at most. A random token's kinds alternate, in runs of one or two
# (`Xk9qLm2Pz7Rt`). Measured (bench/privacy_token_shape.py): of random tokens of this shape 91%
# are still redacted, of the identifiers of this shape in site-packages' .py/.js/.ts 86% kept.
_IDENTIFIER_WORD_CHARS = 3
_IDENTIFIER_SHORT_WORDS = 2
_IDENTIFIER_NUMBERS = 2


def _identifier(value: str) -> bool:
    """Whether a short token of a random token's kinds (`_TOKEN_SHAPE`) reads as an identifier."""
    words = _KEY_WORD.findall(value)
    letters = [word for word in words if not word[0].isdigit()]
    if len(words) - len(letters) > _IDENTIFIER_NUMBERS:
        return False
    short = [word for word in letters if len(word) < _IDENTIFIER_WORD_CHARS]
    total = sum(map(len, letters))
    return len(short) <= _IDENTIFIER_SHORT_WORDS and 4 * sum(map(len, short)) <= total


def credential_plural(name: str) -> tuple[str, bool] | None:
    """For a key naming credentials in the plural, its singular (which `known_value` judges an
    element under) and whether only an element of a token's shape is one; else None. A list
    under a credential's singular (`{"password": ["hunter2"]}`) holds that credential too."""
    if credential_key(name):
        singular = name
    elif name[-1:] in ("s", "S") and credential_key(name[:-1]):
        singular = name[:-1]
    else:
        return None
    last = _KEY_WORD.findall(singular[-_KEY_END_CHARS:])
    while last and last[-1].isdigit():
        last.pop()
    shaped = bool(last) and last[-1].lower() == "token"
    if shaped and len(last) > 1 and (last[-2] + last[-1]).lower() in _CREDENTIAL_WORDS:
        shaped = False
    return singular, shaped


def listed_credential(singular: str, shaped: bool, value: str) -> bool:
    """Whether a string in a list under a credential's plural (`credential_plural`) is one."""
    if known_value(singular, value):
        return False
    if not shaped:
        return True
    if _TOKEN_SHAPE.fullmatch(value) is None or _SPECIAL_TOKEN_VALUE.fullmatch(value):
        return False
    return not (_SHORT_TOKEN.fullmatch(value) and _identifier(value))


_NAME_BEFORE = re.compile(r"[\w.\-]*\Z")


def compiler_pass(name: str) -> bool:
    """Whether `name` is a compiler's or a renderer's pass (`optimization_pass`), which the
    JSON rule's `credential_key` names no credential: the text rules keep its value alike."""
    words = _KEY_WORD.findall(name[-_KEY_END_CHARS:])
    return (
        len(words) > 1
        and words[-1].lower() == "pass"
        and words[-2].lower() in _NOT_CREDENTIAL_PASSES
    )


# What a plain word (letters alone) under a credential's name is when it is no credential:
# a documentation word, a type, a placeholder (`required`, `none`, `str`, `empty`). `changeme`
# is not one: it is the default password of many a deployment, and works wherever nobody
# changed it. A word in capitals (`PASSWORD`, `TOKEN`), camelCase (`accessToken`,
# `hashedPassword`), the name's own word (`password: password`, `token: Token`) or another
# credential's name (`password = passphrase`) is an identifier, a type or a help text's
# placeholder, and is kept by `plain_credential`.
_PLACEHOLDER_WORDS = frozenset(
    {
        *("required", "optional", "none", "null", "nil", "undefined", "true", "false"),
        *("yes", "no", "on", "off", "empty", "blank", "unset", "set", "missing", "hidden"),
        *("masked", "redacted", "omitted", "placeholder", "example", "sample", "dummy"),
        *("str", "string", "text", "bytes", "bool", "boolean", "int", "integer", "number"),
        *("any", "object", "auto", "default", "env", "environment", "prompt", "stdin"),
    }
)
# A result or a state under a credential's name (`token: expired`, `password: incorrect`): a
# status line's, not a password.
_STATUS_WORDS = frozenset(
    {
        *("expired", "invalid", "incorrect", "wrong", "denied", "revoked", "rejected", "refused"),
        *("forbidden", "unauthorized", "unauthorised", "failed", "failure", "error", "valid"),
        *("verified", "unverified", "accepted", "okay", "success", "succeeded", "present"),
        *("absent", "provided", "supplied", "found", "unknown", "unavailable", "disabled"),
        *("enabled", "active", "inactive", "pending", "stale", "rotated", "reset", "changed"),
        *("updated", "saved", "stored", "created", "deleted", "generated", "encrypted"),
        *("hashed", "ignored", "skipped", "needed", "mismatch", "matched", "unchanged"),
        *("refreshed", "issued", "renewed", "cached", "loaded", "exists", "configured"),
    }
)
# A value masked already (`****`, `xxxx`, `XXXXXXXX`): it holds no credential. A mask repeats
# one character; `xXxXxXxX` mixes cases as a password may.
_MASKED_VALUE = re.compile(r"\*{3,}|x{3,}|X{3,}")
# A template's placeholder for a value (`API_KEY=your_api_key`, `your-github-token-here`,
# `<your-api-key>`, `<API key>`): lower-case words after `your`, or words in `<…>`, that say only
# what the name or a credential's word does, or end in `here`. Any other word may be a
# password's (`your_password_is_hunter`, `<hunter>`, `<Hunter Two>`), and so may a digit
# (`your_key_123`), `your` glued on (`yourpassword`) or capitals after it (`Your-Pass-Word`);
# `changeme` is the default password that works wherever nobody changed it: those are redacted.
_PLACEHOLDER_VALUE = re.compile(r"your(?:[_\-][a-z]+)+|<[A-Za-z][A-Za-z _\-.]*>")
_PLACEHOLDER_SPLIT = re.compile(r"[ _\-.]+")
# The words a placeholder may say besides the name's own.
_PLACEHOLDER_NAMES = frozenset(
    {"your", "api", "key", "token", "secret", "password", "pass", "access", "auth", "here"}
    | {"name", "value"}
)


def placeholder(name: str, value: str) -> bool:
    """Whether `value`, under the credential's name `name`, is a template's placeholder (see
    `_PLACEHOLDER_VALUE`): its words the name's, a credential's or a type's, three words or more
    ending in the name's last (`your_replicate_api_key`), or `…_here`."""
    if _PLACEHOLDER_VALUE.fullmatch(value) is None:
        return False
    words = [word.lower() for word in _PLACEHOLDER_SPLIT.split(value.strip("<>")) if word]
    if value[0] == "<" and len(value) - 2 < _PLAIN_MIN_CHARS:
        return True
    if words[-1] == "here":
        return words[0] == "your"
    named = [word.lower() for word in _KEY_WORD.findall(name[-_KEY_END_CHARS:])]
    # A service's name may come first (`<together_api_key>`, `your-replicate-api-key`) when the
    # placeholder ends as the name does.
    if len(words) > 2 and named and words[-1] == named[-1]:
        return True
    return all(
        word in named or word in _PLACEHOLDER_NAMES or word in _PLACEHOLDER_WORDS for word in words
    )


# Plain words under a credential's name shorter than a quoted value's (`_QUOTED` rule, 4) are
# no password in practice (`id`, `pw`, `abc`).
_PLAIN_MIN_CHARS = 4
# camelCase or PascalCase (`accessToken`, `SecretStr`): an identifier's or a type's name.
_CAMEL = re.compile(r"[a-z][A-Z]")


def plain_credential(name: str, value: str) -> bool:
    """Whether `value`, a word of ASCII letters alone under the credential's name `name`, is a
    credential (`swordfish`, `letmein`) rather than a placeholder or an identifier (see
    `_PLACEHOLDER_WORDS`). `pass` names (`DB_PASS`) and special tokens' names (`eos_token`)
    hold a count, a verdict or a tokenizer's word as often: a plain word under them is kept."""
    if len(value) < _PLAIN_MIN_CHARS or value.isupper() or _CAMEL.search(value):
        return False
    lower = value.lower()
    if lower in _PLACEHOLDER_WORDS or lower in _STATUS_WORDS or _MASKED_VALUE.fullmatch(value):
        return False
    words = [word.lower() for word in _KEY_WORD.findall(name[-_KEY_END_CHARS:])]
    while words and words[-1].isdigit():
        words.pop()
    if not words or words[-1] == "pass" or lower in words or lower == "".join(words[-2:]):
        return False
    # Another credential's name is a variable's (`password = passphrase`).
    if credential_key(value):
        return False
    return not (len(words) > 1 and words[-1] == "token" and words[-2] in _NOT_CREDENTIAL_TOKENS)


# A passphrase as people choose one (`correct horse battery staple`): three to six single-spaced
# words of three or more lower-case ASCII letters. Shorter phrases, accents, digits and symbols
# are a locale's text (`mot de passe`, `nueva contraseña`, `senha atual`) or a description
# (`varchar(255) unique`, `bcrypt hash`, `sha256 salted`, `read write`) under a credential's name
# as often, and are kept: so is a two-word `correct horse`. A sentence, a label or a message
# (`not set`, `the secret key`) holds one of a sentence's small words, a placeholder's, a
# status's or the name's own, and is kept too.
_PASSPHRASE = re.compile(r"[a-z]{3,}(?: [a-z]{3,}){2,5}")
_SENTENCE_WORDS = frozenset(
    {
        *("a", "an", "the", "to", "of", "for", "and", "or", "is", "are", "was", "be", "been"),
        *("not", "no", "in", "at", "by", "with", "from", "as", "if", "it", "this", "that"),
        *("your", "my", "our", "their", "his", "her", "its", "enter", "new", "old", "use"),
        *("please", "must", "should", "will", "can", "cannot", "may", "has", "have", "does"),
        *("bearer", "basic", "user", "username", "login", "here", "there", "again", "confirm"),
        *("see", "above", "below", "same", "like", "min", "max", "length", "least", "most"),
        *("characters", "chars", "digits", "letters", "symbols", "words", "too", "short"),
        *("long", "common", "simple", "similar", "weak", "strong", "match", "numeric"),
        # A test's or a document's filler.
        *("foo", "bar", "baz", "qux", "quux", "lorem", "ipsum", "dolor", "test", "fake", "mock"),
    }
)


# A password's label in another language (privacy23): the words naming a password, a passphrase
# or a passcode in the translations of `Password:`, `New password`, `Enter the passphrase`, ... of
# the 3,668 gettext catalogs under a Debian's /usr/share/locale (77 languages), less those an
# English word list (Moby's) holds. A value holding one (`kata sandi baru`, `nova senha aqui`:
# "new password" in Indonesian and Portuguese) is the name's own label. Generation 8 took every
# word of those translations (179: `una`, `sie`, `das`, `por`, `lagi`, `neue`, `nova`...), and a
# diceware passphrase in German, Portuguese or French holding one stayed in clear (fixprivacy23:
# `bench/privacy_locale_words.py`, docs/capture.md).
_LABEL_WORDS = frozenset(
    (
        "adgangsfrase adgangsfrasen adgangskode contrasenya contrasigno contrasinal geslo heslo "
        "iphasiwedi kodeord kontrasenyas lozinka lozinku parola parool parooli pasahitz "
        "pasahitza pasfrazon passord passordet passordfrase passphrase passwoord passwort "
        "pasvorto pasvorton salasana salasanaa sandi senha senhal wachtwoord wagwoord"
    ).split()
)


# The other words of those translations holding a label word (`kata` and `baru` of `kata sandi
# baru`, `masukkan`, `neues`, `eingeben`, `uusi`...), English ones and all: 99 words, derived by
# `bench/privacy_locale_words.py` (privacy24). A phrase of four words or more holding a label
# word is a label only if its other words are these: `casa parola verde sole` holds `parola`
# (Italian "word") among a passphrase's words, and is one (generation 9 kept every phrase
# holding a label word). Three words are a label's length (`nova senha aqui`, `wachtwoord
# opnieuw invoeren`) as often as a passphrase's, and a phrase of them is kept as before.
_LABEL_COMPANION_WORDS = frozenset(
    (
        "actual aktuala aktuelle altes antiga antigo atual baru bekreft berretsi berria berriz "
        "bevestigen bitte cambia canvia das den det donu ein eingeben endre entsha erneut "
        "escriure eski gamalt gammel gammelt geben genindtast gentag gjenta herhalen huidig "
        "idatzi indtast informe inn inserisci introducir introduza kabusha kata kinnita "
        "kirjoita lagi lama lumang masukkan mevcut modifica muuda muuta neue neues nieuw nova "
        "novamente novan nove noverande novo novu nuova nye nykyinen nytt opakujte oud ponovo "
        "redigite rescrie retajpu retypa sie sisestage skriv stadfest thayipha toista tornau "
        "torneu ubah unesite uudelleen uus uusi vanha veche venligst volva wiederholen yeni "
        "zadajte zadejte zaharra znova"
    ).split()
)
# The most words a phrase holding a label word may have to be a label whatever its other words.
_LABEL_MAX_WORDS = 3


def passphrase(name: str, value: str) -> bool:
    """Whether `value`, a quoted value holding a blank under the credential's name `name`, is a
    passphrase (see `_PASSPHRASE`) rather than a sentence, a label or a format."""
    if _PASSPHRASE.fullmatch(value) is None:
        return False
    named = {word.lower() for word in _KEY_WORD.findall(name[-_KEY_END_CHARS:])}
    words = value.split(" ")
    if any(
        word in _SENTENCE_WORDS
        or word in _PLACEHOLDER_WORDS
        or word in _STATUS_WORDS
        or word in _PLACEHOLDER_NAMES
        or word in named
        or _MASKED_VALUE.fullmatch(word)
        or credential_key(word)
        or _ALGORITHM_VALUE.fullmatch(word) is not None
        for word in words
    ):
        return False
    if _LABEL_WORDS.isdisjoint(words):
        return True
    # A label word's phrase is a label when it is a label's length or its other words a label's.
    return len(words) > _LABEL_MAX_WORDS and not all(
        word in _LABEL_WORDS or word in _LABEL_COMPANION_WORDS for word in words
    )


def _credential_assignment(match: re.Match[str]) -> str:
    """`_assignment` unless the whole name (the part the rule matched and the identifier
    before it) and the value are a reference's, the path the name expects, or a compiler's
    pass, or the value is a plain word that no credential is (`plain_credential`); then the
    text as it was."""
    start = match.start()
    before = _NAME_BEFORE.search(match.string, max(0, start - 100), start)
    # The unquoted rule's name holds the line's indent, a list's `- ` and `export `.
    name = (before.group() if before else "") + match.group("name").split()[-1].strip("\"'")
    groups = match.groupdict()
    if groups.get("triple") is not None:
        # A triple-quoted string's value (`_TRIPLE_QUOTED`): its delimiters and the blanks and
        # newlines around it are no part of it, nor those between the lines of a key's.
        lines = groups["lines3"]
        value = "".join(lines.split()) if lines else groups["word3"] or groups["phrase3"]
        phrase = groups["phrase3"] is not None
    elif groups.get("line_triple") is not None:
        # In capitals, any other one-line triple-quoted value (`_TRIPLE_LINE`).
        value = groups["line3"]
        phrase = True
    else:
        value = match.group("value").strip("\"'")
        phrase = groups.get("phrase") is not None
    if "f" in (groups.get("prefix") or "").lower() and _F_STRING_REFERENCES.fullmatch(value):
        return match.group()
    if phrase:
        # A value padded with blanks (`"  hunter22  "`) is the word inside them.
        value = value.strip(" \t")
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
        or (match.re is _CONFIG_PATTERN and _plain_word(value) and _plain_kept(match, name, value))
    )
    return match.group() if kept else _assignment(match)


# An f-string of references alone, or with symbols between them (`f"{secret_value}"`,
# `f"{user}:{token}"`): what it holds is a variable's, not a credential written in the code. A
# letter or a digit outside the braces is the code's (`f"sk-{suffix}"`), judged as any value.
_F_STRING_REFERENCES = re.compile(r"[^\w{}\n]*(?:\{[^{}\n]*\}[^\w{}\n]*)+")


def _plain_word(value: str) -> bool:
    return value.isascii() and value.isalpha()


def _plain_kept(match: re.Match[str], name: str, value: str) -> bool:
    """Whether a plain word on a line of its own under a credential's name is no credential:
    besides `plain_credential`'s words, a value assigned as code spaces it (`password =
    getpass`, `self._token = value`, pygments' `token = Error`: a variable or a class), and a
    capitalised word after `:` is a type or a kind (`token: Name`, `secret: Opaque`). `.env`,
    shell and properties files write `name=value`, YAML `name: value` in lower case."""
    sep = match.group("sep")
    code = "=" in sep and sep[:1] in (" ", "\t") and sep[-1:] in (" ", "\t")
    # A capitalised word after `:` is a type, a column's kind or prose's verdict under a
    # password's name too (`password: Varchar`, `Password: Strong`): only an INI section above
    # makes it a value (generation 6 redacted it under a password's name, and so rewrote code).
    typed = ":" in sep and value[:1].isupper()
    if (code or typed) and not _ini_section_above(match.string, match.start()):
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
    bracket = text.rfind("[", max(0, start - _INI_WINDOW), start)
    if bracket < 0:
        return False
    line = text.rfind("\n", 0, bracket) + 1
    header = _INI_HEADER.match(text, line)
    if header is None:
        return False
    between = _INI_LINES.match(text, header.end(), start)
    return between is not None and between.end() == start


# An unquoted credential holds a character that no identifier or attribute path (`password`,
# `self.password`, `str`, `None`) holds.
_UNQUOTED = r"[^\s\"'#(){}\[\]<>$,;&|`\\]"
_CREDENTIAL_VALUE = rf"(?={_UNQUOTED}*?[^A-Za-z_.\s\"'#(){{}}\[\]<>$,;&|`\\]){_UNQUOTED}+"

# The end of a credential's name, as the unquoted rule and its gate look for it: the words of
# `_CREDENTIAL_WORDS` as text spells them, and the short ones only where they cannot be part of
# a longer word: `pass` after a `_` or `-` or a lower-case letter (`DB_PASS`, `smtp_pass`,
# `dbPass`, not `bypass` or a lone `pass`), `pwd` as a whole word (`MYSQL_PWD`, not `OLDPWD`).
_CREDENTIAL_NAME = (
    r"(?:[pP]assw(?:or)?d|PASSW(?:OR)?D|[sS]ecret|SECRET|[tT]oken|TOKEN"
    r"|[aA]pi[_\-]?[kK]ey|API[_\-]?(?:KEY|[kK]ey)"
    r"|(?:[sS]ecret|[pP]rivate|[sS]igning|[aA]uth)[_\-]?[kK]ey|(?:SECRET|PRIVATE|SIGNING|AUTH)[_\-]?KEY"
    r"|[pP]assphrase|PASSPHRASE|[_\-](?:[pP]ass|PASS)|[a-z]Pass)"
)
_PWD_NAME = r"(?:[pP]wd|PWD)"

# The words of a sentence that may follow an option's name where prose names it (`the --token
# flag`, `--password option`): not its value. Shorter words are no plain credential anyway.
_PROSE_WORDS = frozenset(
    {
        *("flag", "flags", "option", "options", "argument", "arguments", "param", "parameter"),
        *("parameters", "value", "values", "switch", "field", "setting", "variable", "instead"),
        *("only", "must", "should", "will", "with", "when", "which", "that", "this", "then"),
        *("from", "also", "here", "there", "first", "after", "before", "unless", "while"),
        *("where", "since", "because", "both", "either", "into", "onto", "over", "once"),
        *("requires", "needs", "expects", "takes", "accepts", "given", "provided"),
    }
)
# A help text's placeholder for an option's value: `--password PASSWORD`, `--token API_TOKEN`.
_OPTION_PLACEHOLDER = re.compile(r"[A-Z_]+")


def _option_credential(match: re.Match[str]) -> str:
    """`--password swordfish`, `--api-key 'x'`: the value redacted unless the option names no
    credential (`credential_key`; `--no-password` takes none), or the value is no credential by
    its shape (`known_value`), a help text's placeholder, or a plain word that a placeholder,
    an identifier or a sentence's word is (`plain_credential`, `_PROSE_WORDS`)."""
    name = match.group("name")
    value = match.group("value")
    quote = value[0] if value[0] in ("'", '"') else ""
    bare = value[1:-1] if quote else value
    kept = (
        name.startswith(("no-", "no_"))
        or not bare
        or not credential_key(name)
        or known_value(name, bare)
        or _OPTION_PLACEHOLDER.fullmatch(bare) is not None
        or (
            _plain_word(bare) and (not plain_credential(name, bare) or bare.lower() in _PROSE_WORDS)
        )
    )
    if kept:
        return match.group()
    return f"{match.group('keep')}{quote}{REDACTED}{quote}"


# The ends of an option's name that `credential_key` may judge a credential's, one lookbehind
# each (a lookbehind's width is fixed), in lower case and in capitals (`--API-TOKEN`), `pass`
# after a `-` or a `_` (`--db-pass`, `--db_pass`).
_OPTION_ENDS = (
    *("password", "passwd", "passphrase", "token", "secret", "key", "-pass", "_pass", "pwd"),
    *("PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "KEY", "-PASS", "_PASS", "PWD"),
)
# `--name value` or `--name=value` after a blank, a quote or the text's start (not `a--b`,
# `---`); the name's words joined by `-` or `_` (`--api-key`, `--api_token`): possessive, so
# each `--` costs one pass over its word.
_OPTION_PATTERN = re.compile(
    r"(?P<keep>--(?<![\w\-]--)(?P<name>[A-Za-z0-9]++(?:[-_][A-Za-z0-9]++)*+)"
    + "(?:"
    + "|".join(f"(?<={end})" for end in _OPTION_ENDS)
    + r")(?:[ \t]++|=))"
    + _NOT_REDACTED
    + r"(?![-$<{%])(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s\"'`;|&()<>]+)"
)
OPTION_RULES: list[_Rule] = [
    # The config rule's literals (no more for the scanner to find): each end holds one.
    (
        (*("assw", "ssphrase", "oken", "ecret", "key", "-pass", "_pass", "pwd"),)
        + ("ASSW", "SSPHRASE", "OKEN", "ECRET", "KEY", "-PASS", "_PASS", "PWD"),
        _OPTION_PATTERN,
        _option_credential,
    )
]


# The ends of a credential's name as a list's name spells them, plural or singular (`apiKeys`,
# `PASSWORDS`, `credentials`, `password`), by the literal each begins with: one of the config
# rule's literals, or `redential`. A rule each, so that each pattern begins with its literal and
# Python's search skips to it: one alternation of them all was tried at every character of a
# text that the gate let in for a React Query `queryKey: [` (34 µs for 1.65 KB of TypeScript).
_PLURAL_STEMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    *(("assw", ("ord", "d")), ("ecret", ("",)), ("oken", ("",)), ("key", ("",))),
    *(("Key", ("",)), ("ssphrase", ("",)), ("pwd", ("",)), ("Pwd", ("",)), ("redential", ("",))),
    *(("ASSW", ("ORD", "D")), ("ECRET", ("",)), ("OKEN", ("",)), ("KEY", ("",))),
    *(("SSPHRASE", ("",)), ("PWD", ("",)), ("CREDENTIAL", ("",))),
)
# A scalar of a list as JSON, a Python repr or YAML's flow style writes it: a string (escapes
# and all), or a bare one (`3`, `null`, `None`, YAML's `hunter2` or `p@ss!`).
_LIST_SCALAR = (
    r"\"[^\"\\\n]*+(?:\\.[^\"\\\n]*+)*+\"|'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|[^\s,\[\]{}\"'#]++"
)
_LIST_SPACE = r"[ \t\r\n]*+"
# Between a list's brackets, a comment may stand where a blank may, as Python, TOML and YAML
# allow (`api_keys = [  # prod` and `"k1",  # first` on the lines of a multi-line list: privacy26,
# generation 12 kept such a list in clear). A bare element holds no `#`, and a string holds its
# own, so a `#` outside them starts a comment.
_LIST_GAP = r"[ \t\r\n]*+(?:#[^\n]*+[ \t\r\n]*+)*+"
# An element, or a comment, as `_listed_credentials` reads a list's items one by one.
_LIST_ELEMENT_PATTERN = re.compile(r"#[^\n]*+|" + _LIST_SCALAR)
# Where a list's first item starts: past brackets, blanks and comments.
_LIST_ITEMS_START = re.compile(r"[\[ \t\r\n]*+(?:#[^\n]*+[\[ \t\r\n]*+)*+")


def _first_item(items: str) -> str:
    """A list's items from the first one's start (`_LIST_ITEMS_START`)."""
    start = _LIST_ITEMS_START.match(items)
    return items[start.end() :] if start else items


# An element: a scalar, or a list of scalars (`[["user", "hunter2"]]`: a list nested in a
# credential's list holds its credentials, as in JSON).
_LIST_ELEMENT = (
    rf"{_LIST_SCALAR}|\[{_LIST_GAP}(?:(?:{_LIST_SCALAR})"
    rf"(?:{_LIST_GAP},{_LIST_GAP}(?:{_LIST_SCALAR}))*+(?:{_LIST_GAP},)?{_LIST_GAP})?\]"
)
# A bare scalar as JSON or a repr writes one: a number, `null`, `None`, `true` (all the rule
# read before YAML's flow lists; a call or an expression is code's).
_JSON_BARE = re.compile(r"[\w.+\-]+")
# A list under a name ending in a credential's word, plural or singular (`"apiKeys": ["k1",
# "k2"]`, `"password": ["x"]`, YAML's `passwords: [a1, b2]`), found from the name's last word;
# the name's start is looked for behind it (`_listed_credentials`). Every repetition is
# possessive: an element is read once, and a list that does not close fails without trying
# shorter ones.
# Its items hold a string or a bare element with a digit or a symbol (or a nested list): a list
# of names (`keys: [a, b]`, `passwords: [str]`) is one `_listed_credentials` would leave, and
# failing here spares it a call of Python each (15,000 YAML lines of them took 19 ms, 1.6 ms at
# 23d5d19). The names before it are read possessively, so a list is still read once.
_LIST_NAME = r"[A-Za-z_.]++"
_LIST_ITEM = r"\[|\"|'|[A-Za-z_.]*+[^\s,\[\]{}\"'#A-Za-z_.]"
_LIST_REST = (
    rf"(?P<quote>[\"']?){_LIST_SPACE}(?P<sep>[:=]){_LIST_SPACE}\[{_LIST_GAP}"
    rf"(?P<items>(?:{_LIST_NAME}{_LIST_GAP},{_LIST_GAP})*+(?={_LIST_ITEM})(?:{_LIST_ELEMENT})"
    rf"(?:{_LIST_GAP},{_LIST_GAP}(?:{_LIST_ELEMENT}))*+)"
    # A trailing comma, as JavaScript, Python and JSON5 allow (`["k1",\n "k2",\n]`).
    rf"(?:{_LIST_GAP},)?{_LIST_GAP}\]"
)


def _stem(literal: str, ends: tuple[str, ...]) -> str:
    return literal + ("(?:" + "|".join(ends) + ")" if ends != ("",) else "")


# A list under a name ending in `key`, `Key` or `KEY` (an `s` after it aside) is a credential's
# only when the ASCII letter or digit nearest before that `key` is the one before `key` in a
# credential word (`apikey`, `secretkey`, ...): `credential_key` reads a name's ASCII letters
# and digits alone, lower-cased and joined (`_KEY_WORD`), and `key` alone names nothing. Between
# the two may stand only the name's other characters (`_name_before`'s `[\w.\-]`: `_`, `.`, `-`,
# a non-ASCII letter, whose UTF-8 bytes are \x80-\xff). So a bare `keys`, `primary_keys` or
# `"keys"` list selects no rule in a long text (`LIST_NAME_GATES`): a module of
# `keys = ['name', 'email']` lines ran the rule on each, ~3 µs a line (privacy25). Where the
# rule runs anyway (a short text takes every gate as found), such a list is let go before its
# name is read.
_KEY_STEM = "key"
_KEY_NAME_LETTERS = "".join(
    sorted({word[-len(_KEY_STEM) - 1] for word in _CREDENTIAL_WORDS if word.endswith(_KEY_STEM)})
)
_KEY_NAME_BEFORE = rf"[{_KEY_NAME_LETTERS}{_KEY_NAME_LETTERS.upper()}][_.\-\x80-\xff]*"
_KEY_NAME_LETTERS_CASED = frozenset(_KEY_NAME_LETTERS + _KEY_NAME_LETTERS.upper())
# Where the name's character nearest before its `key` (past at most two of `_`, `.`, `-`) is
# an ASCII one that no credential word has there (`keys` at a line's start, `primary_keys`,
# `foreign-keys`), the pattern itself fails, as `_listed_credentials` would let the list go: a
# module of `keys = [...]` lines that also held one credential's list (which the gate lets in)
# called that function once a line (18 ms for 15,000 lines, 0.6 ms without the credential's
# list). Past more separators the function decides, as before.
_KEY_NAME_NOT = rf"[^{_KEY_NAME_LETTERS}{_KEY_NAME_LETTERS.upper()}_.\-\x80-\U0010ffff]"


def _key_guard(literal: str) -> str:
    """Lookbehinds after a `key` literal that fail where `_listed_credentials` keeps the list."""
    return "".join(
        f"(?<!{before}{separators}{literal})"
        for before in (_KEY_NAME_NOT, "^")
        for separators in ("", r"[_.\-]", r"[_.\-]{2}")
    )


_LIST_PATTERNS = [
    re.compile(
        f"(?P<listed>{_stem(literal, ends)}"
        + (_key_guard(literal) if literal.lower() == _KEY_STEM else "")
        + f"[sS]?){_LIST_REST}"
    )
    for literal, ends in _PLURAL_STEMS
]
# YAML's flow list is one on a line of its own: an indent and a block list's `- ` before its
# name, a comment at most after it (a `passwords: [a1]` in a line of code is not YAML's).
_YAML_BEFORE = re.compile(r"[ \t]*(?:-[ \t]+)?")
# Before a TOML or INI key (`passwords = [...]`): an indent alone.
_ASSIGNED_BEFORE = re.compile(r"[ \t]*")
# Or a TOML inline table's key (`db = { user = "app", passwords = ["hunter2x"] }`, privacy26:
# generation 12 kept it in clear): the table's name and `= {` on the line before it, perhaps
# other keys but no `}` (a list after the table's end, `db = { x = 1 }, keys = [...]`, is in a
# line of code), and the table's `,` or `}` after the list.
_INLINE_TABLE_BEFORE = re.compile(r"[ \t]*[\w.\-\"']+[ \t]*=[ \t]*\{(?:[^\n}]*[,{])?[ \t]*")
_INLINE_TABLE_AFTER = re.compile(r"[ \t]*[,}]")
# A comment's `#` is enough: the rest of its line is not read (for each of a line's lists).
_YAML_AFTER = re.compile(r"[ \t]*+(?:\r?\n|\Z)|[ \t]++#")
# How far before a name its line's start is looked for: an indent is shorter, and each of a
# megabyte's lists costs a bounded search, not the line's.
_YAML_INDENT_CHARS = 100
# What the config rule leaves of a bare value as code's: a number or a version, a dotted name.
_CODE_VALUE = re.compile(r"[-+]?v?\d+(?:\.\d+)*|(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*")
_BARE_CREDENTIAL = re.compile(_CREDENTIAL_VALUE)


# What a list's element names rather than holds, in config and code (rev-privacy22): an option
# (`-p`, `--password`), a reference (`${PASSWORD}`, `$TOKEN`, `%KEY%`), a rule, scope or prefixed
# name of words with a number at most (`min:8`, `read:pets`, `env:OPENAI_API_KEY`), a resource's
# path of lower-case words (`kube-system/my-secret`), a URL without a user (the URL rule redacts
# one's password before), an e-mail address, or a mask (`sk-...`, `ghp_***`).
# Narrower than it looks on purpose (rev-mends22): a digit is allowed only in a validation rule's
# bound (`min:8`, not `pass:1234`), a path and a URL hold none in the path and no query
# (`p4ss/w0rd`, `ftp://x/y?pw=hunter2` are judged as values), and a mask is a short prefix and
# the mask alone (`sk-...`, not `hunter2...`).
_NAMED_VALUE = re.compile(
    r"--?[A-Za-z][\w\-]*"
    r"|\$\{?[A-Za-z_][\w.]*\}?|%[A-Za-z_]\w*%"
    r"|[A-Za-z_][A-Za-z_\-]*(?::[A-Za-z_][A-Za-z_\-.]*)+"
    r"|(?:min|max|size|length|len|digits|between|gt|gte|lt|lte)(?::[0-9]{1,4}(?:,[0-9]{1,4})?)"
    r"|[a-z][a-z.\-]*(?:/[a-z][a-z.\-]*)+"
    r"|[a-z][a-z0-9+.\-]*://[^\s@?#]*"
    r"|[\w.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"
    r"|[A-Za-z_\-]{0,12}(?:\.{3}|\u2026|\*{3,})"
)


def _yaml_credential(singular: str, value: str) -> bool:
    """Whether a bare element of a YAML flow list under a credential's name is one, as the
    config rule judges a bare value (`password: hunter2`): a character no identifier holds, and
    not a number, a dotted name or a name (`_NAMED_VALUE`: `env:OPENAI_API_KEY`, an OpenAPI
    scope's `read:pets`). A plain word is kept under a plural as under a singular: a list of
    them names providers, places or roles (`api_keys: [primary, secondary]`, `[openai,
    anthropic]`, `[header, query]`) far more often than it holds passwords. Under `secrets` a
    Secret's name is as usual as a value (Kubernetes' `imagePullSecrets: [regcred]`, Compose's
    `secrets: [db-password]`): words joined by `-` or `.`."""
    if _CODE_VALUE.fullmatch(value) or _plain_word(value) or _NAMED_VALUE.fullmatch(value):
        return False
    if _KEY_WORD.findall(singular[-_KEY_END_CHARS:])[-1:] in (["secret"], ["Secret"]) and (
        _SECRET_NAME_VALUE.fullmatch(value)
    ):
        return False
    return _BARE_CREDENTIAL.fullmatch(value) is not None


# A word of an identifier's characters (`set_git_credential`, `self.token`): a module's or a
# function's name as a list in code holds them (huggingface_hub's `"_git_credential": [...]`).
_IDENTIFIER_VALUE = re.compile(r"[A-Za-z_][A-Za-z_.]*")


def _singular_listed(value: str) -> bool:
    """Whether an element without a blank, in a list under a credential's singular name in
    text, is one: a digit or a symbol, not a number, a version, an identifier or a name
    (`_NAMED_VALUE`). A singular's list in code and config names things
    (`"_git_credential": ["set_git_credential"]`, a role's `"secret": ["get", "list"]`,
    `"api_key": ["header", "query"]`, `"password": ["required", "min:8"]`); a plural's holds
    values."""
    return (
        _CODE_VALUE.fullmatch(value) is None
        and _IDENTIFIER_VALUE.fullmatch(value) is None
        and _NAMED_VALUE.fullmatch(value) is None
    )


# `_NAME_BEFORE` read backwards from the name's end: its search from 100 characters before
# tried every one of them (17 µs a list in TypeScript's `useQuery({ queryKey: [...] })`).
_NAME_CHARS = re.compile(r"[\w.\-]*")
# A list's items that hold no string and no bare element with a digit or a symbol.
_NAMES_ONLY = re.compile(r"[A-Za-z_.,\s\[\]]*+")


_NAME_BEFORE_CHARS = 100


def _name_before(text: str, end: int) -> str:
    """The identifier's characters right before `end`, 100 at most: what `_NAME_BEFORE` finds."""
    window = text[max(0, end - _NAME_BEFORE_CHARS) : end][::-1]
    found = _NAME_CHARS.match(window)
    length = found.end() if found else 0
    return text[end - length : end]


# A list's names repeat down a file (`keys = [...]` on each of a module's lines, where the
# assigned lists' gate runs the rule): judged once each, a line of them cost 4.6 µs, a third of
# it `credential_key`'s splitting twice. JSON's keys repeat in every stored row a rescan reads
# (app/privacy/engine.py): one cache for both. A long name is judged each time, so that an
# attacker's megabyte key is not held.
_PLURAL_NAME_CACHE_CHARS = 100
_plural_names = lru_cache(maxsize=4096)(credential_plural)


def plural_name(name: str) -> tuple[str, bool] | None:
    """`credential_plural`, remembered for a short name."""
    if len(name) <= _PLURAL_NAME_CACHE_CHARS:
        return _plural_names(name)
    return credential_plural(name)


_KEY_PATTERNS = frozenset(
    pattern
    for (literal, _), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
    if literal.lower() == _KEY_STEM
)
# By identity: a pattern's hash is computed anew each time, over its compiled code (~1.8 µs).
_KEY_PATTERN_IDS = frozenset(map(id, _KEY_PATTERNS))


def _listed_credentials(match: re.Match[str]) -> str:
    """A list under a credential's name in text: each string element that the JSON rule
    redacts in an object (`credential_plural`, `listed_credential`) redacted alike, one with a
    blank only if it is a passphrase (text's lists are code's as often: `"password": ["This
    field is required."]`); in YAML's flow style, a bare element too (`_yaml_credential`). TOML's
    and INI's `name = [...]` (privacy24) as a quoted name's list: on lines of its own (a
    multi-line array too), strings and JSON's bare scalars alone, a string first."""
    start = match.start()
    text = match.string
    if id(match.re) in _KEY_PATTERN_IDS:
        # The name's character nearest before its `key` that `_KEY_WORD` reads, if it is ASCII.
        last = text[max(0, start - _NAME_BEFORE_CHARS) : start].rstrip("_.-")[-1:]
        if last.isascii() and last not in _KEY_NAME_LETTERS_CASED:
            return match.group()
    items = match.group("items")
    quote = match.group("quote")
    assigned = match.group("sep") == "="
    strings = bool(quote) or assigned
    # Only a string or, in YAML, a bare element with a digit or a symbol is ever redacted: a
    # list of names is let go before its name is read (`keys: [a, b]` 15,000 times took 70 ms).
    if not items or (
        "'" not in items and '"' not in items and (strings or _NAMES_ONLY.fullmatch(items))
    ):
        return match.group()
    # What the gate asks of an assigned list (`OPTION_AND_LIST_GATES`).
    if assigned and _first_item(items)[:1] not in ("'", '"'):
        return match.group()
    stem = _name_before(text, start)
    opening = start - len(stem) - 1
    if quote and (opening < 0 or text[opening] != quote):
        return match.group()
    if not quote or assigned:
        name_start = start - len(stem) - (1 if quote else 0)
        line = text.rfind("\n", max(0, name_start - _YAML_INDENT_CHARS), name_start) + 1
        before = _ASSIGNED_BEFORE if assigned else _YAML_BEFORE
        at_line = line > 0 or name_start <= _YAML_INDENT_CHARS
        own_line = (
            (assigned or "\n" not in match.group())
            and at_line
            and before.fullmatch(text, line, name_start) is not None
            and _YAML_AFTER.match(text, match.end()) is not None
        )
        in_table = (
            assigned
            and at_line
            and _INLINE_TABLE_BEFORE.fullmatch(text, line, name_start) is not None
            and _INLINE_TABLE_AFTER.match(text, match.end()) is not None
        )
        if not (own_line or in_table):
            return match.group()
    name = stem + match.group("listed")
    listed = plural_name(name)
    if listed is None:
        return match.group()
    singular = listed[0]
    named_singular = singular == stem + match.group("listed")
    # A JSON or repr list with a call or an expression in it is code's, as before YAML's bare
    # elements widened the pattern (`["k1", f(x)]`).
    if strings and not all(
        found[0] in ("'", '"', "#") or _JSON_BARE.fullmatch(found)
        for found in _LIST_ELEMENT_PATTERN.findall(items)
    ):
        return match.group()

    def element(found: re.Match[str]) -> str:
        scalar = found.group()
        if scalar[0] == "#":
            return scalar
        if scalar[0] not in ("'", '"'):
            redacted = (
                not strings
                and listed_credential(*listed, scalar)
                and _yaml_credential(singular, scalar)
                and (not named_singular or _singular_listed(scalar))
            )
            return REDACTED if redacted else scalar
        value = scalar[1:-1]
        if not value or not listed_credential(*listed, value):
            return scalar
        if any(char.isspace() for char in value):
            redacted = passphrase(singular, value)
        else:
            redacted = not named_singular or _singular_listed(value)
        return f"{scalar[0]}{REDACTED}{scalar[0]}" if redacted else scalar

    whole = match.group()
    head, tail = match.start("items") - start, match.end("items") - start
    return whole[:head] + _LIST_ELEMENT_PATTERN.sub(element, items) + whole[tail:]


LIST_RULES: list[_Rule] = [
    ((literal,), pattern, _listed_credentials)
    for (literal, _), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
]
# Hyperscan gates (app/privacy/engine.py): the option's name and a value's first byte; a listed
# credential's name's end and `: [`.
# hyperscan 0.9.1 missed ~half of the long texts' `pwds: ['hunter2', 'x1']` lines that `re`
# matches with this end after `pwd`'s list (in the privacy rules' database; alone it matched):
# the `pwd` names' gate stops at the list's first string or symbol, and the rule decides.
_YAML_LIST_END = r"[^\n]*\][\t ]*(?:\r?\n|#|$)"
# Each list rule's gate, its branches apart (tests/test_privacy_gen8_gates.py reaches each one).
LIST_GATE_BRANCHES: dict[re.Pattern[str], tuple[str, ...]] = {
    pattern: (
        # A quoted name's list.
        rf"{_stem(literal, ends)}[sS]?[\"'][\t\n\r ]*:[\t\n\r ]*\["
        r"[\t\n\r ,A-Za-z_.]*[^\t\n\r ,A-Za-z_.\]]",
        # YAML's flow list.
        rf"{_stem(literal, ends)}[sS]?[\t\r ]*:[\t\r ]*\["
        r"[\t\r ,A-Za-z_.]*[^\t\n\r ,A-Za-z_.\]]"
        + ("" if literal.lower() == "pwd" else _YAML_LIST_END),
        # TOML's and INI's `name = [` and a string (privacy24).
        # A comment before the first string (privacy26) lets the rule run at its `#`: read to
        # its line's end, the gate left hyperscan missing other branches' lists in long texts.
        rf"{_stem(literal, ends)}[sS]?[\"']?[\t\n\r ]*=[\t\n\r ]*\[[\t\n\r \[]*[\"'#]",
    )
    for (literal, ends), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
}
OPTION_AND_LIST_GATES: dict[re.Pattern[str], str] = {
    _OPTION_PATTERN: (
        "--[A-Za-z0-9_-]*(?:" + "|".join(_OPTION_ENDS) + r")(?:[\t ]+|=)[^\x09-\x0d\x20]"
    ),
    # The stems whole: with their last two letters only, the name's `s` and quote optional
    # left `:` as the literal hyperscan confirms from, and its scan took twice as long. A list
    # that `_listed_credentials` reads: under a quoted name, or ending its line (YAML's), and
    # holding a string or a bare element with a digit or a symbol past the names before it
    # (`_LIST_ITEM`). A line of code's `queryKey: [...],` (React Query) let the rule run on every
    # TypeScript chunk holding one (13.3 µs for 1.65 KB, 4.5 µs at 23d5d19), a YAML file of
    # `keys: [a, b]` on each of its lines. The literal first: a line's start before the name
    # (`(?:^|\n)[\t ]*…Key`) made hyperscan run its automaton over every line.
    **{pattern: "|".join(branches) for pattern, branches in LIST_GATE_BRANCHES.items()},
}
# The scan's gates for the `key` names' rules (app/privacy/engine.py), narrower than the ones
# above (`_KEY_NAME_LETTERS`): the output is the same as with these, so the rules' digest
# (version.py) records these, and no stored row is rescanned for the narrowing.
LIST_NAME_GATES: dict[re.Pattern[str], str] = {
    pattern: _KEY_NAME_BEFORE + "(?:" + "|".join(LIST_GATE_BRANCHES[pattern]) + ")"
    for pattern in _LIST_PATTERNS
    if pattern in _KEY_PATTERNS
}


REGISTRY_RULES: list[_Rule] = [
    # .npmrc: `//registry.npmjs.org/:_authToken=...`, `:_auth=` (base64 user:password) and
    # `:_password=`; npm 9 accepts these scoped to a registry only, hence the colon.
    (
        (":_",),
        re.compile(
            r"(?P<keep>:_(?:authToken|auth|password)\s*=\s*)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            + r"[^\s\"']+"
        ),
        _keep_group("keep"),
    ),
    # Azure storage / service bus connection strings: AccountKey=...; SharedAccessKey=...
    (
        ("Key=",),
        re.compile(
            r"(?P<keep>(?:AccountKey|SharedAccessKey)=)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            + r"[^;\s\"']+"
        ),
        _keep_group("keep"),
    ),
]


# A connection string's keys as libpq, ADO.NET, ODBC and JDBC name them (`host`, `Server`,
# `Data Source`, `User Id`, `Initial Catalog`, `sslmode`): a plain word before `password` is one
# only between two of them. One-line code assigns a word between any names (`password=input;
# user=get_user();`, `opts.password=newpass; opts.user=name;`, `local password=readpass`), and so
# does `password=swordfish; user=bob` alone, which is kept as generation 5 kept it.
_CONNECTION_KEY = (
    r"(?i:server|host|hostaddr|data[ ]source|addr|address|network[ ]address|user[ ]?id|uid"
    r"|user|username|database|initial[ ]catalog|dbname|port|sslmode|encrypt|driver"
    r"|trusted_connection|integrated[ ]security|application[ ]name|connect_timeout)"
)
_CONNECTION_KEY_BEFORE = re.compile(
    rf"(?:^|(?<=[;&\s])){_CONNECTION_KEY}[ \t]*=[^;&\s=]*+(?:[ \t]*+[;&][ \t]*+|[ \t]++)\Z"
)
# How far before `password=` its string's previous key is looked for.
_CONNECTION_KEY_WINDOW = 200


def _connection_credential(match: re.Match[str]) -> str:
    """A connection or query string's password redacted, unless it is a plain word that no
    credential is (`plain_credential`: `password=required; user=x`) or that no connection
    string's key comes before (`_CONNECTION_KEY`)."""
    value = match.group("value")
    if _plain_word(value):
        # The literal starts after the name's first letter (`assword=`, `wd=`).
        name_start = match.start() - 1
        before = _CONNECTION_KEY_BEFORE.search(
            match.string, max(0, name_start - _CONNECTION_KEY_WINDOW), name_start
        )
        if before is None or not plain_credential("password", value):
            return match.group()
    return f"{match.group('keep')}{REDACTED}"


# A URL query's parameter (`?token=swordfish&x=1`, `&api_key=abc123`): a name ending in a
# credential's word (one lookbehind each, in lower case, capitalised or in capitals; which names
# one `credential_key` judges), the value up to the next parameter, a fragment or the URL's end.
_QUERY_ENDS = tuple(
    spelled
    for word in ("token", "key", "secret", "password", "passwd", "pass", "pwd", "phrase")
    + ("credential", "credentials")
    for spelled in (word, word.capitalize(), word.upper())
)
_QUERY_PATTERN = re.compile(
    r"(?P<keep>[?&](?P<name>[A-Za-z0-9_.\-]{1,64}+)(?:"
    + "|".join(f"(?<={end})" for end in _QUERY_ENDS)
    + r")=)"
    + _NOT_REDACTED
    + r"(?![{$<%])(?P<value>[^&#\s\"'<>{}$%`|()\\,;\[\]]++)(?![{}$%`|(\\])"
)


# Words a query's credential-named parameter takes as a setting, not a secret: fetch's
# `?credentials=include`, a version's `?token=latest`, a service's public `?apikey=demo`.
_QUERY_WORDS = frozenset({"include", "omit", "latest", "current", "demo", "public", "anonymous"})


def _query_credential(match: re.Match[str]) -> str:
    """A query parameter under a credential's name redacted, unless it is a paging cursor
    (`?pageToken=`, `?nextPageToken=`, whatever its shape: a cursor is no credential), its value
    is no credential by its shape (`known_value`), a placeholder in capitals
    (`?token=YOUR_TOKEN`), a setting's word (`_QUERY_WORDS`) or a plain word that no credential
    is (`plain_credential`: `?token=expired`)."""
    name = match.group("name")
    value = match.group("value")
    kept = (
        not credential_key(name)
        or _cursor_name(name)
        or value.lower() in _QUERY_WORDS
        or known_value(name, value)
        or _OPTION_PLACEHOLDER.fullmatch(value) is not None
        or (_plain_word(value) and not plain_credential(name, value))
    )
    return match.group() if kept else f"{match.group('keep')}{REDACTED}"


QUERY_RULES: list[_Rule] = [(("?", "&"), _QUERY_PATTERN, _query_credential)]
# Its hyperscan gate: a parameter whose name ends in a credential's word, and a value's first byte.
QUERY_GATE = r"[?&][A-Za-z0-9_.\-]*(?:" + "|".join(_QUERY_ENDS) + r")=[^&#\x09-\x0d\x20\"'<>{}$%]"

CONNECTION_RULES: list[_Rule] = [
    # Any command's `--password=...` (mysql, docker login, redis-cli, psql wrappers).
    (
        ("assword=",),
        re.compile(
            r"(?P<keep>--password=)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            # A help text's placeholder: `--password=PASSWORD`.
            + r"(?![A-Z_]+(?![^\s\"']))[^\s\"']+"
        ),
        _keep_group("keep"),
    ),
    # Unquoted `password=` in connection strings and query strings (`...;Password=hunter2;`,
    # `?user=a&password=s3cret`; PASSWORD= is the .env rule's), and `Pwd=` after a `;`. The
    # value must hold a character no identifier has (a digit, a symbol), so that code passing
    # `password=password` or `password=self.password` keeps it; or be a plain word between
    # two of a connection string's keys (`Server=db;Password=swordfish;User Id=app`, libpq's
    # `host=db password=swordfish user=bob`; `_CONNECTION_KEY`).
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<keep>{literal}{before})"
                + _NOT_REDACTED
                # `%s`, `%(pw)s`: a query's parameter, not its value; `==` a comparison.
                + r"(?!%[s(])(?!=)(?P<value>"
                + _CREDENTIAL_VALUE
                + r"|[A-Za-z]++(?=(?:[ \t]*+[;&][ \t]*+|[ \t]++)"
                + _CONNECTION_KEY
                + r"[ \t]*+=(?!=)))"
            ),
            _connection_credential,
        )
        for literal, before in (
            ("assword=", "(?<=[pP]assword=)(?<![A-Za-z][pP]assword=)"),
            ("wd=", "(?<=;[pP]wd=)"),
            ("WD=", "(?<=;PWD=)"),
        )
    ),
]


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
_CONFIG_PATTERN = re.compile(
    r"^(?P<name>[ \t]*(?:-[ \t]+)?(?:export[ \t]+)?"
    rf"(?:[\w.\-]*?{_CREDENTIAL_NAME}|(?:[\w.\-]*?[_.\-])?{_PWD_NAME}))"
    r"(?P<sep>[ \t]*[:=][ \t]*)"
    + _NOT_REDACTED
    + r"(?![=:])(?![-+]?v?\d+(?:\.\d+)?\b)(?!(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*\b)(?P<value>"
    + _CREDENTIAL_VALUE
    # A value in `<…>` (`<hunter2>`, `<Hunter Two>`) as JSON judges it (`known_value`).
    + r"|[A-Za-z]++|<(?![%$\{])[^<>\n]{1,100}+>)(?<!:)(?=[ \t]*(?:[ \t]#[^\n]*)?\r?$)",
    re.MULTILINE,
)

# A TOML (or Python) triple-quoted string of one line, `"""hunter2x"""` or `'''hunter2x'''`, or
# that line alone between the delimiters' lines (TOML trims the newline after the opening one):
# judged as the value in one pair of quotes is, a word (`word3`) or a phrase (`phrase3`, by
# `passphrase`), the blanks around it aside (`"""  hunter2x  """`). A word may hold a quote
# that does not close it (`"""ab"cd"""`, privacy26: generation 12 kept it in clear); a phrase
# holds none, so that it cannot run past its closing delimiter. A text of several lines is a
# key's (`lines3`: a word on each line, base64's as a private key's body) or a help text or a
# docstring, which is kept; a PEM key is KEY_RULES'.
_TRIPLE_CHAR = r"(?:[^\"'\s]|(?!(?P=triple))[\"'])"
_TRIPLE_QUOTED = (
    r"(?P<triple>\"\"\"|''')(?:[ \t]*(?:\r?\n)?[ \t]*"
    rf"(?:(?P<word3>{_TRIPLE_CHAR}{{4,}}+)|(?P<phrase3>[^\"'\n:=]{{4,100}}+))"
    r"[ \t]*(?:\r?\n)?[ \t]*"
    rf"|(?P<lines3>(?:[ \t]*\r?\n[ \t]*{_TRIPLE_CHAR}++){{2,}}+[ \t]*(?:\r?\n[ \t]*)?))"
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
# rule redacted the prefix alone, `PASSWORD = [REDACTED]"s3cr3t"`).
_STRING_PREFIX = r"(?P<prefix>(?:[bB][rR]|[rR][bB]|[fF][rR]|[rR][fF]|[rRbBuUfF])(?=[\"']))?"

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
                + r"|\"[^\"\n]++\"|\"\"(?!\")|'[^'\n]++'|''(?!')"
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
                + r"(?P<value>\"[^\"\s]{4,}\"|'[^'\s]{4,}'"
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
    # Unquoted values of credential-named keys on a line of their own (see _CONFIG_PATTERN).
    (
        (
            *("assw", "ASSW", "ecret", "ECRET", "oken", "OKEN", "key", "Key", "KEY"),
            *("ssphrase", "SSPHRASE", "_pass", "-pass", "_PASS", "-PASS", "Pass"),
            *("pwd", "Pwd", "PWD"),
        ),
        _CONFIG_PATTERN,
        _credential_assignment,
    ),
]
