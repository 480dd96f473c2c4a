"""Keep secrets out of a bug-report archive: by name, by value and by shape.

A secret is found three ways:

- by **name**: an environment variable, or a command-line option, whose name contains TOKEN,
  KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH (any case; ``TOKENIZERS_*`` and
  ``--max-tokens`` are settings, not secrets). Its value is secret, as is the argument after
  such an option (``--api-key X``, ``--api-key=X``) and after the short options ``-t`` and
  ``-p`` (a token, a password: ``-t X``, ``-t=X``, ``-tX``);
- by **shape**: a known token prefix (``ghp_``, ``github_pat_``, ``glpat-``, ``hf_``, ``sk-``,
  ``xox?-``, ``AKIA``, ``AIza``, ``ya29.``, a JWT ``eyJ...``), a PEM private key block, the
  password in a URL (``scheme://user:PASSWORD@host``);
- as a variable's or an argument's value only (not in free text, where graph hashes look the
  same): one word of 32 or more letters, digits and ``+/=_.-`` that mixes letters and digits and
  is not a path, a file name or a model id (``org/model-name``).

``Scrubber`` then replaces every secret *value* found so (wherever it appears: a script that
prints its token, a traceback that shows an argument) and every token-shaped string in any
text with ``<redacted>``. Values shorter than ``MIN_SCRUB_LENGTH`` are hidden where they are
named (env.txt, the command line) but not searched for elsewhere: ``1`` or ``false`` would
match ordinary text. This errs on the side of hiding: a 40-character git hash in a variable
is hidden as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "REDACTED",
    "Scrubber",
    "is_secret_name",
    "looks_like_token",
    "redact_argv",
    "redact_env",
    "redact_value",
    "secret_values",
]

REDACTED = "<redacted>"
MIN_SCRUB_LENGTH = 6
SECRET_SHORT_OPTIONS = ("-t", "-p")

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
# Names that contain TOKEN but count tokens or configure a tokenizer.
_SETTING_NAME = re.compile(
    r"TOKENI[SZ]|(?:MAX|MIN|NUM|N)[_-]?(?:NEW[_-]?)?TOKENS?(?![A-Za-z])", re.IGNORECASE
)
_TOKEN_SHAPE = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|xox[a-z]-[A-Za-z0-9\-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|ya29\.[0-9A-Za-z_\-]{20,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r")"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_.\-]{32,}")
_FILE_NAME = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,4}$")
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]+:)(?P<pw>[^@/\s]+)(?=@)")


def is_secret_name(name: str) -> bool:
    """Whether a variable or option name says its value is a secret."""
    return bool(_SECRET_NAME.search(_SETTING_NAME.sub("", name)))


def looks_like_token(value: str) -> bool:
    """True when a value (not its name) looks like a credential; see the module docstring."""
    if _TOKEN_SHAPE.search(value):
        return True
    if not _OPAQUE.fullmatch(value) or value.startswith(("/", ".", "~")) or "//" in value:
        return False
    if _FILE_NAME.search(value) or os.path.exists(value):
        return False
    # Base64 uses "/", URL-safe tokens use "-" and "_": a word with "/" and one of "-_." is a
    # relative path or a model id (TinyLlama/TinyLlama-1.1B-Chat-v1.0), not a token.
    if "/" in value and any(c in value for c in "-_."):
        return False
    return any(c.isalpha() for c in value) and any(c.isdigit() for c in value)


def _scrub_shapes(text: str) -> str:
    """``text`` with token-shaped strings and URL passwords replaced."""
    return _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED, _TOKEN_SHAPE.sub(REDACTED, text))


def _opaque_secret(value: str) -> bool:
    """A whole value that is a secret by name-independent shape (see ``looks_like_token``)."""
    return bool(_TOKEN_SHAPE.fullmatch(value)) or (looks_like_token(value) and not _TOKEN_SHAPE.search(value))


def redact_value(name: str, value: str) -> str:
    if value and (is_secret_name(name) or _opaque_secret(value)):
        return REDACTED
    return _scrub_shapes(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with secret values replaced by ``<redacted>`` (names are kept)."""
    return {name: redact_value(name, value) for name, value in env.items()}


def _secret_option(arg: str) -> bool:
    """``--api-key``, ``-token``, ``-t``: an option whose next argument is a secret."""
    return arg in SECRET_SHORT_OPTIONS or (arg.startswith("-") and len(arg) > 2 and is_secret_name(arg))


def _split_argv(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each argument as (what may be shown of it, its secret value or None)."""
    out: list[tuple[str, str | None]] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(("", arg))
            hide_next = False
        elif arg.startswith("-") and "=" in arg:
            opt, _, val = arg.partition("=")
            secret = _secret_option(opt) or _opaque_secret(val)
            out.append((opt + "=", val) if secret else (arg, None))
        elif _secret_option(arg):
            out.append((arg, None))
            hide_next = True
        elif arg[:2] in SECRET_SHORT_OPTIONS and len(arg) > 2 and not arg.startswith("--"):
            out.append((arg[:2], arg[2:]))  # -tVALUE
        elif _opaque_secret(arg):
            out.append(("", arg))
        else:
            out.append((arg, None))
    return out


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with the values of secret options and token-like words redacted."""
    return [
        _scrub_shapes(shown) if secret is None else shown + (REDACTED if secret else "")
        for shown, secret in _split_argv(argv)
    ]


def secret_values(env: Mapping[str, str], argv: Sequence[str]) -> set[str]:
    """Every secret value that the environment and the command line hold, to search for elsewhere."""
    found: set[str] = set()
    for name, value in env.items():
        if value and (is_secret_name(name) or _opaque_secret(value)):
            found.add(value)
        found.update(m["pw"] for m in _URL_PASSWORD.finditer(value))
    for arg, (_, secret) in zip(argv, _split_argv(argv)):
        if secret:
            found.add(secret)
        found.update(m["pw"] for m in _URL_PASSWORD.finditer(arg))
    return found


class Scrubber:
    """Replaces known secret values and token-shaped strings in text and files."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        words: set[str] = set()
        for value in values:
            # A multi-line secret (a PEM key in a variable) is printed line by line.
            words.update(line.strip() for line in value.splitlines())
        words = {w for w in words if len(w) >= MIN_SCRUB_LENGTH}
        # Longest first: a value that contains another is replaced whole.
        alternatives = [re.escape(w) for w in sorted(words, key=len, reverse=True)]
        self._values = re.compile("|".join(alternatives)) if alternatives else None

    def scrub(self, text: str) -> str:
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        return _scrub_shapes(text)

    def scrub_file(self, path: Path) -> None:
        """Rewrite ``path`` scrubbed (bytes that are not UTF-8 are kept as they are)."""
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        clean = self.scrub(text)
        if clean != text:
            path.write_text(clean, encoding="utf-8", errors="surrogateescape")
