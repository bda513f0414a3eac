"""SSH servers tests stand up in place of a node or a guest."""

from __future__ import annotations

import asyncssh


class AnyKeyServer(asyncssh.SSHServer):
    """Lets anyone in with any key: what a test checks is what the client does once in (a
    forced command, or whether it trusts an impostor), not who may log in."""

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True
