"""Access key secrets are kept encrypted (not hashed): verifying an HMAC signature needs
the secret itself. The Fernet key is derived from ACCESS_KEY_ENCRYPTION_SECRET."""

from __future__ import annotations

import base64
import functools
import hashlib

from cryptography.fernet import Fernet
from django.conf import settings


def fernet_key(secret: str) -> bytes:
    """The Fernet key derived from `secret` (ACCESS_KEY_ENCRYPTION_SECRET)."""
    digest = hashlib.sha256(("paiweb-access-keys:" + secret).encode()).digest()
    return base64.urlsafe_b64encode(digest)


@functools.cache
def _fernet(secret: str) -> Fernet:
    return Fernet(fernet_key(secret))


def encrypt_secret(plain: str) -> str:
    return _fernet(settings.ACCESS_KEY_ENCRYPTION_SECRET).encrypt(plain.encode()).decode()


def decrypt_secret(token: str) -> str:
    return _fernet(settings.ACCESS_KEY_ENCRYPTION_SECRET).decrypt(token.encode()).decode()
