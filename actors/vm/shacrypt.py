"""SHA-512 crypt (`$6$`), so the cloud-init password reaches `qm set --cipassword` already hashed.

qemu-server stores a value matching `^\\$(?:[156]|2[ay])(\\$.+){2}` as it is and hashes anything
else itself; hashing here keeps the plain password off every command line. The algorithm is
Ulrich Drepper's "Unix crypt using SHA-256 and SHA-512" (the `crypt` module left Python 3.13).
"""

from __future__ import annotations

import hashlib
import secrets

_ALPHABET = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ROUNDS_DEFAULT = 5000
# The byte order in which the final digest is spelled out, three bytes per four characters.
_ORDER = (
    (0, 21, 42), (22, 43, 1), (44, 2, 23), (3, 24, 45), (25, 46, 4), (47, 5, 26), (6, 27, 48),
    (28, 49, 7), (50, 8, 29), (9, 30, 51), (31, 52, 10), (53, 11, 32), (12, 33, 54),
    (34, 55, 13), (56, 14, 35), (15, 36, 57), (37, 58, 16), (59, 17, 38), (18, 39, 60),
    (40, 61, 19), (62, 20, 41),
)  # fmt: skip


def _b64(value: int, count: int) -> str:
    out = []
    for _ in range(count):
        out.append(_ALPHABET[value & 0x3F])
        value >>= 6
    return "".join(out)


def _repeat(digest: bytes, length: int) -> bytes:
    return (digest * (length // 64 + 1))[:length]


def sha512_crypt(password: str, salt: str | None = None, rounds: int = _ROUNDS_DEFAULT) -> str:
    pw = password.encode()
    if salt is None:
        salt = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    s = salt[:16].encode()
    alt = hashlib.sha512(pw + s + pw).digest()
    a = hashlib.sha512(pw + s + _repeat(alt, len(pw)))
    n = len(pw)
    while n:
        a.update(alt if n & 1 else pw)
        n >>= 1
    da = a.digest()
    dp = _repeat(hashlib.sha512(pw * len(pw)).digest(), len(pw))
    ds = _repeat(hashlib.sha512(s * (16 + da[0])).digest(), len(s))
    c = da
    for i in range(rounds):
        h = hashlib.sha512(dp if i & 1 else c)
        if i % 3:
            h.update(ds)
        if i % 7:
            h.update(dp)
        h.update(c if i & 1 else dp)
        c = h.digest()
    encoded = "".join(_b64((c[x] << 16) | (c[y] << 8) | c[z], 4) for x, y, z in _ORDER)
    encoded += _b64(c[63], 2)
    prefix = "$6$" if rounds == _ROUNDS_DEFAULT else f"$6$rounds={rounds}$"
    return f"{prefix}{salt[:16]}${encoded}"
