"""One redaction function for everything rubin prints or stores: errors, log lines, events, saved configs.

Storage URLs often carry their credential inline (an Azure SAS ``sig=``, an S3 presigned
``X-Amz-Signature``, a ``token=``), an MLflow URI can hold ``user:password@``, and a config may
hold a Hugging Face or GitHub token. Whatever comes through here keeps its shape (host, path, key
names) so that the message stays useful, with the secret part replaced by ``REDACTED``.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "REDACTED"

# Query-string (or key=value) parameters whose value is a credential. Matched case-insensitively.
SECRET_PARAMS = (
    "sig", "signature", "se", "skoid", "sktid", "skt", "ske", "sks", "skv", "x-amz-signature", "x-amz-credential",
    "x-amz-security-token", "x-goog-signature", "x-goog-credential", "token", "access_token", "refresh_token",
    "id_token", "api_key", "apikey", "secret", "client_secret", "password", "passwd", "pwd",
)

_PARAM_RE = re.compile(r"(?i)(?<![\w.-])(" + "|".join(re.escape(p) for p in SECRET_PARAMS) + r")=([^&#\s'\"]+)")
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s:'\"]+)(?::([^/@\s'\"]*))?@")
_TOKEN_RES = tuple(re.compile(r"(?<![A-Za-z0-9])" + p + r"(?![A-Za-z0-9])") for p in (
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key id
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI-style keys
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWT
))  # a token glued to other text by '_' or '/' is still a token
_BEARER_RE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
# Mapping keys whose string value is a credential whatever it looks like (``sas_token: ...``).
_SECRET_KEY_RE = re.compile(r"(?i)(token|passw(or)?d|secret|signature|^sig$|api_?key|access_?key|sas|credential|private_?key)")
_ACCOUNT_KEY_RE = re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey)=([^;'\"\s]+)")


def redact(text: str) -> str:
    """TEXT with signatures, URL passwords and known token shapes replaced by ``REDACTED``."""
    if not isinstance(text, str) or not text:
        return text
    out = _PARAM_RE.sub(lambda m: f"{m.group(1)}={MASK}", text)
    out = _USERINFO_RE.sub(_userinfo, out)
    out = _ACCOUNT_KEY_RE.sub(lambda m: f"{m.group(1)}={MASK}", out)
    out = _BEARER_RE.sub(lambda m: f"{m.group(1)} {MASK}", out)
    for pattern in _TOKEN_RES:
        out = pattern.sub(MASK, out)
    return out


def _userinfo(m: re.Match) -> str:
    scheme, user, password = m.group(1), m.group(2), m.group(3)
    if password is None:  # https://TOKEN@host: a bare userinfo is usually a token too
        return f"{scheme}{MASK}@"
    return f"{scheme}{user}:{MASK}@"


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like value (dict keys stay as they are)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: MASK if isinstance(v, str) and v and _SECRET_KEY_RE.search(str(k)) else redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj) if isinstance(obj, list) else tuple(redact_obj(v) for v in obj)
    return obj
