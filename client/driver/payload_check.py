"""The receipt payload checker (docs/protocol.md#driver-rules: receipts hold hashes, ids and counts
— never a prompt, a file path, a token or an account name). `check_payload` raises `ValueError`,
before anything is sent, naming the first key or value that looks like one; the builders and the
writer in receipts.py run every payload through it, and so does `lane receipt`.

What the checker refuses (`ValueError`, raised before anything is sent; the rules are
listed in docs/driver-guide.md, "Receipts"):
- keys: a key is split into words (camelCase, `_`, `-`, `.`, spaces); it is refused when a
  word is one of KEY_WORDS (prompt, text, path, file, token, secret, ...) or it contains one of
  KEY_SUBSTRINGS (password, filename, apikey, ...), unless its LAST word is one of
  SAFE_LAST_WORDS (hash, hashes, count, ...): `promptHash` and `fileCount` pass, `promptText`,
  `filePath` and `accountName` do not. Keys with whitespace or over 64 characters are refused.
- string values: `sha256:<64 hex>` always passes; under a `...Hash`/`...Hashes` key a bare
  lowercase hex digest (16-128 hex) passes too. Otherwise refused: anything with `/` or `\\`,
  a leading `~`, a drive letter (`C:`), or a media/document file name (`clip.mp4`); free text
  (any line break, or whitespace with 4+ words or over 40 characters); `Bearer ...`/`Basic
  ...`; JWT shapes (three dot-separated base64url segments); e-mail addresses; well-known
  secret prefixes (`sk-`, `ghp_`, `xoxb-`, `AKIA`, ...); long high-entropy token-like strings
  (20+ characters of `[A-Za-z0-9_.+=~:-]` mixing letters and digits with >= 3 bits of entropy
  per character) except under the provider-id keys in ID_KEYS (`providerJobId`, ...) and
  `...Hash`/`...Hashes` keys (a digest may be base64url); the
  lane's account name, or a value containing the lane; and anything over 256 characters.
- other values: numbers must be finite; only JSON types (dict with str keys, list, str, int,
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

KEY_WORDS: Final = frozenset(
    {"prompt", "prompts", "text", "texts", "path", "paths", "file", "files", "filename",
     "filenames", "dir", "folder", "token", "tokens", "secret", "secrets", "password",
     "passwd", "pass", "account", "accounts", "email", "emails", "mail", "credential",
     "credentials", "cookie", "cookies", "key", "keys", "url", "urls", "uri", "auth",
     "authorization", "bearer", "session", "login", "username", "caption", "description"}
)  # fmt: skip
KEY_SUBSTRINGS: Final = (
    "prompt", "password", "passwd", "secret", "token", "filename", "filepath", "apikey",
    "account", "email", "credential", "cookie", "bearer",
)  # fmt: skip
SAFE_LAST_WORDS: Final = frozenset({"hash", "hashes", "sha256", "count", "counts", "bytes"})
#: Keys whose values are provider-issued ids: exempt from the token-shape rule only.
ID_KEYS: Final = frozenset(
    {"providerjobid", "providerjobids", "providermediaid", "providermediaids"}
)
MAX_DEPTH: Final = 8
MAX_STRING: Final = 256
MAX_KEY: Final = 64

SHA256_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
HEX_DIGEST_RE: Final = re.compile(r"[0-9a-f]{16,128}")
_WORDS_RE: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_DRIVE_RE: Final = re.compile(r"[A-Za-z]:(?:$|[^0-9])")
_FILE_EXT_RE: Final = re.compile(
    r"\S+\.(?:mp4|mov|m4v|webm|mkv|avi|gif|png|jpe?g|webp|heic|tiff?|bmp|svg|wav|mp3|m4a|"
    r"aac|flac|ogg|txt|md|json|ya?ml|toml|csv|pdf|docx?|srt|vtt|env|pem|key|sqlite|db)",
    re.IGNORECASE,
)
_JWT_RE: Final = re.compile(r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}")
_EMAIL_RE: Final = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_TOKENISH_RE: Final = re.compile(r"[A-Za-z0-9_.+=~:-]{20,}")
_SECRET_PREFIX_RE: Final = re.compile(
    r"(?:sk-|sk_live_|sk_test_|rk_live_|pk_live_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|"
    r"xox[abposr]-|AKIA|ASIA|AIza|hf_|r8_|ya29\.)[A-Za-z0-9_.-]{8,}"
)


def key_words(key: str) -> list[str]:
    """`promptHash` -> ['prompt', 'hash']; `file_path` -> ['file', 'path']."""
    return [w.lower() for w in _WORDS_RE.findall(key)]


def _key_problem(key: str) -> str | None:
    if not key or len(key) > MAX_KEY or any(c.isspace() for c in key):
        return "keys must be 1-64 characters without whitespace"
    words = key_words(key)
    if words and words[-1] in SAFE_LAST_WORDS:
        return None
    flat = re.sub(r"[^a-z0-9]", "", key.lower())
    bad = next((w for w in words if w in KEY_WORDS), None)
    bad = bad or next((s for s in KEY_SUBSTRINGS if s in flat), None)
    if bad is not None:
        return (
            f"a key naming {bad!r} is refused (receipts hold hashes, ids and counts; "
            "name it ...Hash or ...Count and send a hash or a count)"
        )
    return None


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def looks_token_like(s: str) -> bool:
    """A long, unbroken, high-entropy string mixing letters and digits (an API key, a session
    id, a signed URL part), or a well-known secret prefix."""
    if _SECRET_PREFIX_RE.match(s):
        return True
    if not _TOKENISH_RE.fullmatch(s):
        return False
    has_digit = any(c.isdigit() for c in s)
    has_alpha = any(c.isalpha() for c in s)
    return has_digit and has_alpha and _entropy(s) >= 3.0


def _string_problem(value: str, key: str, account: str | None, lane: str | None) -> str | None:
    if SHA256_RE.fullmatch(value):
        return None
    words = key_words(key)
    if words and words[-1] in ("hash", "hashes", "sha256") and HEX_DIGEST_RE.fullmatch(value):
        return None
    if len(value) > MAX_STRING:
        return f"strings are at most {MAX_STRING} characters (free text is refused)"
    if "/" in value or "\\" in value:
        return "looks like a file path or a URL"
    if value.startswith("~") or _DRIVE_RE.match(value) or _FILE_EXT_RE.fullmatch(value):
        return "looks like a file path or a file name"
    if "\n" in value or "\r" in value:
        return "looks like free text (a prompt?)"
    if any(c.isspace() for c in value):
        low = value.strip().lower()
        if low.startswith(("bearer ", "basic ", "token ")):
            return "looks like an Authorization header"
        if len(value) > 40 or len(value.split()) >= 4:
            return "looks like free text (a prompt?)"
    if _JWT_RE.fullmatch(value):
        return "looks like a JWT"
    if _EMAIL_RE.fullmatch(value.strip()):
        return "looks like an e-mail address (an account name?)"
    if account and value.strip().lower() == account.lower():
        return "is the lane's account name"
    if lane and lane.lower() in value.lower():
        return "contains the lane (route:account)"
    if _SECRET_PREFIX_RE.match(value):
        return "looks like a token or secret (a well-known secret prefix)"
    id_like = key.lower() in ID_KEYS or (bool(words) and words[-1] in ("hash", "hashes"))
    if not id_like and looks_token_like(value):
        return "looks like a token or secret (high-entropy string)"
    return None


def check_payload(
    payload: Mapping[str, Any], *, account: str | None = None, lane: str | None = None
) -> None:
    """Raise ValueError naming the first key or value that looks like a prompt, a path, a
    token or an account name (rules in the module docstring). `lane` (route:account) makes
    the account name itself refused too."""
    if not isinstance(payload, Mapping):
        raise ValueError("payload: must be a JSON object")
    if lane and account is None and ":" in lane:
        account = lane.split(":", 1)[1]
    _walk(payload, "payload", "", 0, account, lane)


def _walk(
    value: Any, where: str, key: str, depth: int, account: str | None, lane: str | None
) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: keys must be strings")
            problem = _key_problem(k)
            if problem is not None:
                raise ValueError(f"{where}.{k}: {problem}")
            _walk(v, f"{where}.{k}", k, depth + 1, account, lane)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _walk(v, f"{where}[{i}]", key, depth + 1, account, lane)
    elif isinstance(value, str):
        problem = _string_problem(value, key, account, lane)
        if problem is not None:
            raise ValueError(f"{where}: refused, {problem}")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        # The coordinator reads every number as a double (RFC 8785), so an integral value
        # beyond ±(2^53−1) may not be the number meant, however it is written (10**21, 1e21).
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite")
        if abs(value) > 2**53 - 1:
            raise ValueError(
                f"{where}: a whole number beyond ±(2^53-1) is not exact as a double "
                "(RFC 8785); send it as a string"
            )
    else:
        raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


__all__ = [
    "HEX_DIGEST_RE",
    "ID_KEYS",
    "KEY_SUBSTRINGS",
    "KEY_WORDS",
    "MAX_DEPTH",
    "MAX_KEY",
    "MAX_STRING",
    "SAFE_LAST_WORDS",
    "SHA256_RE",
    "check_payload",
    "key_words",
    "looks_token_like",
]
