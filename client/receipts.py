"""Receipts for a driver (SPEC §4.5, §8): the four phases, payload builders, a payload
checker that refuses anything that looks like a prompt, a file path, a token or an account
name, and a writer that never lets a receipt stop a render.

    r = Receipts(backend, lane, ticket_id)
    await r.references_applied([hash_file(p) for p in refs])    # hashes, never the paths
    await r.provider_submitted(job_id)

Ids and hashes are the coordinator's own functions (`coordinator.core.receipts`): the
content hash is `sha256:<hex>` over the payload's RFC 8785 (JCS) canonical JSON and the id
is `<ticketId>:<phase>:<first 16 hex of the hash>`, so the same facts are the same receipt
however often they are written.

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
  float, bool, None), nested at most 8 deep.

Writing (`Receipts.write`): the local queue keeps no receipts, so there it is a no-op (the
checker still runs, so a bad payload fails on a developer's machine too). On the shared
coordinator a refused write (any 4xx, e.g. 403 not-holder or 409 receipt-conflict), an
unreachable or timed-out coordinator, a 5xx or a malformed answer — and, under
LANE_REQUIRED=1, the PreProviderError those become — is logged as a warning, recorded in
`dropped`, and the call returns None. It never raises for those: receipts are evidence, never a
condition (SPEC §8).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from client.api import LOCAL_KIND
from client.errors import LaneClientError
from client.models import ReceiptReply
from coordinator.core.receipts import canonical_json
from coordinator.core.receipts import content_hash as _hash_canonical
from coordinator.core.receipts import receipt_id_for as _receipt_id_for
from coordinator.errors import LaneError

if TYPE_CHECKING:
    from client.api import LaneBackend

log = logging.getLogger("lane.receipts")

LEASE_ACQUIRED: Final = "lease-acquired"
REFERENCES_APPLIED: Final = "references-applied"
PROVIDER_SUBMITTED: Final = "provider-submitted"
PROVIDER_TERMINAL: Final = "provider-terminal"
PHASES: Final = (LEASE_ACQUIRED, REFERENCES_APPLIED, PROVIDER_SUBMITTED, PROVIDER_TERMINAL)

#: How a provider job can end, as written in a provider-terminal receipt.
TERMINAL_STATUSES: Final = frozenset(
    {"completed", "failed", "timeout", "cancelled", "submit-failed", "not-submitted",
     "lease-lost"}
)  # fmt: skip

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


# ---------------------------------------------------------------- hashing and ids


def content_hash(payload: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the payload's RFC 8785 canonical JSON (what the coordinator checks)."""
    try:
        return _hash_canonical(canonical_json(dict(payload)))
    except LaneError as exc:
        raise ValueError(exc.message) from None


def receipt_id(ticket_id: str, phase: str, payload_or_hash: Mapping[str, Any] | str) -> str:
    """`<ticketId>:<phase>:<first 16 hex of the content hash>`."""
    if phase not in PHASES:
        raise ValueError(f"phase: must be one of {', '.join(PHASES)}")
    h = payload_or_hash if isinstance(payload_or_hash, str) else content_hash(payload_or_hash)
    if not SHA256_RE.fullmatch(h):
        raise ValueError("contentHash: must be sha256:<64 lowercase hex>")
    return _receipt_id_for(ticket_id, phase, h)


def hash_bytes(data: bytes) -> str:
    """`sha256:<hex>` of raw bytes (a reference image, an output video)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hash_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """`sha256:<hex>` of a file's bytes, read locally. The path itself never goes anywhere."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


# ---------------------------------------------------------------- the checker


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
    elif isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise ValueError(f"{where}: integers must be within ±2^53-1 (RFC 8785)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite")
    else:
        raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


# ---------------------------------------------------------------- payload builders


def _hashes(values: Iterable[str], what: str) -> list[str]:
    out = []
    for v in values:
        if not isinstance(v, str) or not SHA256_RE.fullmatch(v):
            raise ValueError(f"{what}: every entry must be sha256:<64 lowercase hex>")
        out.append(v)
    return out


def _count(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: must be a non-negative integer")
    return value


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def lease_acquired_payload(
    *,
    prompt_hash: str,
    fence: int | None,
    lease_seconds: float | None = None,
    scene_count: int | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The request hash the ticket was granted for, its fence and lease length."""
    return _drop_none(
        {
            "promptHash": prompt_hash,
            "fence": fence,
            "leaseSeconds": lease_seconds,
            "sceneCount": _count(scene_count, "scene_count"),
            "attempt": _count(attempt, "attempt"),
        }
    )


def references_applied_payload(
    reference_hashes: Sequence[str],
    *,
    required_slots: int | None = None,
    provider_media_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """The sha256 of each reference, in slot order, measured before the submit."""
    hashes = _hashes(reference_hashes, "reference_hashes")
    return _drop_none(
        {
            "referenceHashes": hashes,
            "referenceCount": len(hashes),
            "requiredSlots": _count(required_slots, "required_slots"),
            "providerMediaIds": list(provider_media_ids) or None,
        }
    )


def provider_submitted_payload(
    provider_job_id: str, *, attempt: int | None = None, request_hash: str | None = None
) -> dict[str, Any]:
    """The provider's job id (and optionally the hash of the exact request body sent)."""
    if not provider_job_id:
        raise ValueError("provider_job_id: required")
    if request_hash is not None:
        _hashes([request_hash], "request_hash")
    return _drop_none(
        {
            "providerJobId": provider_job_id,
            "attempt": _count(attempt, "attempt"),
            "requestHash": request_hash,
        }
    )


def provider_terminal_payload(
    provider_job_id: str | None,
    status: str,
    *,
    output_hashes: Sequence[str] = (),
    output_count: int | None = None,
) -> dict[str, Any]:
    """How the provider job ended, and the sha256 of what it produced."""
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"status: must be one of {', '.join(sorted(TERMINAL_STATUSES))}")
    hashes = _hashes(output_hashes, "output_hashes")
    return _drop_none(
        {
            "providerJobId": provider_job_id,
            "status": status,
            "outputHashes": hashes or None,
            "outputCount": _count(output_count, "output_count")
            if output_count is not None
            else (len(hashes) if hashes else None),
        }
    )


# ---------------------------------------------------------------- the writer


@dataclass(frozen=True, slots=True)
class WrittenReceipt:
    phase: str
    receipt_id: str
    content_hash: str
    stored: bool
    replay: bool
    content_hash_verified: bool | None


@dataclass(frozen=True, slots=True)
class DroppedReceipt:
    phase: str
    receipt_id: str
    reason: str  # the error code and status, never the payload


@dataclass
class Receipts:
    """Writes one ticket's receipts; refused or unreachable writes are dropped (logged)."""

    backend: LaneBackend
    lane: str
    ticket_id: str
    written: list[WrittenReceipt] = field(default_factory=list)
    dropped: list[DroppedReceipt] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """False on the local queue (it keeps no receipts)."""
        return self.backend.kind != LOCAL_KIND

    async def write(self, phase: str, payload: Mapping[str, Any]) -> ReceiptReply | None:
        """Check, then send one receipt. ValueError for a bad phase or payload (nothing is
        sent); None when it was dropped or the backend keeps no receipts."""
        if phase not in PHASES:
            raise ValueError(f"phase: must be one of {', '.join(PHASES)}")
        body = dict(payload)
        check_payload(body, lane=self.lane)
        rid = receipt_id(self.ticket_id, phase, body)
        if not self.enabled:
            return None
        try:
            reply = await self.backend.receipt(self.lane, self.ticket_id, phase, body)
        except LaneClientError as exc:
            reason = f"{exc.code} (HTTP {exc.status})" if exc.status else exc.code
            self.dropped.append(DroppedReceipt(phase, rid, reason))
            log.warning(
                "receipt %s dropped (%s): receipts are evidence, the render goes on", rid, reason
            )
            return None
        self.written.append(
            WrittenReceipt(
                phase,
                reply.receipt_id or rid,
                reply.content_hash,
                reply.stored,
                reply.replay,
                reply.content_hash_verified,
            )
        )
        if reply.content_hash_verified is False:
            log.warning("receipt %s stored but its content hash was not verified", rid)
        return reply

    async def lease_acquired(
        self,
        *,
        prompt_hash: str,
        fence: int | None,
        lease_seconds: float | None = None,
        scene_count: int | None = None,
        attempt: int | None = None,
    ) -> ReceiptReply | None:
        return await self.write(
            LEASE_ACQUIRED,
            lease_acquired_payload(
                prompt_hash=prompt_hash,
                fence=fence,
                lease_seconds=lease_seconds,
                scene_count=scene_count,
                attempt=attempt,
            ),
        )

    async def references_applied(
        self,
        reference_hashes: Sequence[str],
        *,
        required_slots: int | None = None,
        provider_media_ids: Sequence[str] = (),
    ) -> ReceiptReply | None:
        return await self.write(
            REFERENCES_APPLIED,
            references_applied_payload(
                reference_hashes,
                required_slots=required_slots,
                provider_media_ids=provider_media_ids,
            ),
        )

    async def provider_submitted(
        self, provider_job_id: str, *, attempt: int | None = None, request_hash: str | None = None
    ) -> ReceiptReply | None:
        return await self.write(
            PROVIDER_SUBMITTED,
            provider_submitted_payload(provider_job_id, attempt=attempt, request_hash=request_hash),
        )

    async def provider_terminal(
        self,
        provider_job_id: str | None,
        status: str,
        *,
        output_hashes: Sequence[str] = (),
        output_count: int | None = None,
    ) -> ReceiptReply | None:
        return await self.write(
            PROVIDER_TERMINAL,
            provider_terminal_payload(
                provider_job_id, status, output_hashes=output_hashes, output_count=output_count
            ),
        )


__all__ = [
    "LEASE_ACQUIRED",
    "PHASES",
    "PROVIDER_SUBMITTED",
    "PROVIDER_TERMINAL",
    "REFERENCES_APPLIED",
    "TERMINAL_STATUSES",
    "DroppedReceipt",
    "Receipts",
    "WrittenReceipt",
    "check_payload",
    "content_hash",
    "hash_bytes",
    "hash_file",
    "lease_acquired_payload",
    "looks_token_like",
    "provider_submitted_payload",
    "provider_terminal_payload",
    "receipt_id",
    "references_applied_payload",
]
