"""What names a credential and what a value under one is: a key's words (`credential_key`),
references, paths, algorithms, placeholders, plain words, passphrases, a list's credentials. Every
rule family that reads a credential by its name (`assignments`, `options`, `lists`,
`connections`) judges with these, and so do the JSON rules (`engine`)."""

from __future__ import annotations

import base64
import re


def basic_credentials(value: str) -> bool:
    """Whether `value` is the base64 of `user:password`, as HTTP Basic and Docker's `auth` hold."""
    try:
        return b":" in base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error is one
        return False


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


def _plain_word(value: str) -> bool:
    return value.isascii() and value.isalpha()


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


# A help text's placeholder for an option's value: `--password PASSWORD`, `--token API_TOKEN`.
_OPTION_PLACEHOLDER = re.compile(r"[A-Z_]+")
