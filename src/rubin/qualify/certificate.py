"""``certificate.json``: the verdict, every input's sha256, the env fingerprint, the rubin version and
the time; optionally signed with Ed25519. ``check`` re-hashes every file and verifies the signature.

The signature covers the canonical JSON of the certificate without its ``signature`` field, so a
changed verdict is caught as surely as a changed file. Signing needs the optional ``cryptography``
package (``pip install 'rubin[sign]'``); without a key the certificate is unsigned and says so.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rubin.errors import ExitCode, RubinError, UsageError

KIND = "rubin.qualify.certificate"
SCHEMA_VERSION = 1


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hash_tree(paths, root: Path) -> dict[str, str]:
    """{path relative to root (or absolute when outside it): sha256} for every file under ``paths``."""
    out = {}
    for p in paths:
        p = Path(p)
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.name.startswith(".") or "checkpoints" in f.parts or "heartbeats" in f.parts:
                continue  # hidden temporaries, checkpoints (own manifests), live heartbeats: not evidence
            try:
                key = str(f.resolve().relative_to(root.resolve()))
            except ValueError:
                key = str(f.resolve())
            out[key] = sha256(f)
    return out


def canonical(cert: dict) -> bytes:
    body = {k: v for k, v in cert.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UsageError("signing needs the cryptography package: pip install 'rubin[sign]' (or drop --sign-key)") from None
    return serialization, ed25519


def load_private_key(path):
    serialization, ed25519 = _crypto()
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--sign-key {str(p)!r} does not exist; make one with: rubin qualify --new-key {p}")
    try:
        key = serialization.load_pem_private_key(p.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--sign-key {str(p)!r} is not an unencrypted PEM private key ({exc}); make one with: "
                         f"rubin qualify --new-key FILE") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UsageError(f"--sign-key {str(p)!r} is a {type(key).__name__}, not an Ed25519 key; "
                         "make one with: rubin qualify --new-key FILE")
    return key


def new_key(path) -> Path:
    """Write a fresh Ed25519 private key (PEM, mode 600) and its public key beside it (``.pub``)."""
    serialization, ed25519 = _crypto()
    p = Path(path)
    if p.exists():
        raise UsageError(f"--new-key {str(p)!r} exists; refusing to overwrite a key, choose another path")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    p.touch(mode=0o600)
    p.write_bytes(pem)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    p.with_name(p.name + ".pub").write_bytes(pub)
    return p


def sign(cert: dict, key) -> dict:
    serialization, _ = _crypto()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    cert["signature"] = {"algorithm": "ed25519", "public_key": raw.hex(), "value": key.sign(canonical(cert)).hex()}
    return cert


class Tampered(RubinError):
    exit_code = ExitCode.PROBLEMS


def check(path, public_key=None) -> dict:
    """Verify a certificate; return {verdict, files, signed, ...}. Raises Tampered (exit 3) naming the file."""
    p = Path(path)
    from rubin.errors import load_mapping

    cert = load_mapping(p, "certificate", "pass the certificate.json that rubin qualify wrote")
    if cert.get("kind") != KIND:
        raise UsageError(f"certificate {str(p)!r} has kind={cert.get('kind')!r}, expected {KIND!r}; pass a certificate.json "
                         f"written by rubin qualify")
    root = p.parent
    bad, missing = [], []
    for name, digest in (cert.get("inputs") or {}).items():
        f = Path(name) if Path(name).is_absolute() else root / name
        if not f.is_file():
            missing.append(name)
        elif sha256(f) != digest:
            bad.append(name)
    if bad:
        raise Tampered(f"{bad[0]}: sha256 differs from certificate {str(p)!r}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                       + "; the file changed after qualification")
    if missing:
        raise Tampered(f"{missing[0]}: missing, but listed in certificate {str(p)!r}" +
                       (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    sig = cert.get("signature")
    signed = False
    if sig:
        _, ed25519 = _crypto()
        from cryptography.exceptions import InvalidSignature

        try:
            pub = ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(sig["public_key"]))
            pub.verify(bytes.fromhex(sig["value"]), canonical(cert))
        except (InvalidSignature, ValueError, KeyError, TypeError):
            raise Tampered(f"{p.name}: the Ed25519 signature does not match its content; the certificate was edited "
                           f"after signing") from None
        if public_key is not None:
            serialization, _ = _crypto()
            want = serialization.load_pem_public_key(Path(public_key).read_bytes())
            raw = want.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
            if raw != sig["public_key"]:
                raise Tampered(f"{p.name}: signed by key {sig['public_key'][:16]}…, not by --public-key {public_key}")
        signed = True
    elif public_key is not None:
        raise Tampered(f"{p.name}: not signed, but --public-key was given")
    return {"certificate": str(p), "verdict": cert.get("verdict"), "files": len(cert.get("inputs") or {}), "signed": signed,
            "key": (sig or {}).get("public_key"), "created": cert.get("created")}
