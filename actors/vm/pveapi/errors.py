"""pveproxy's failures as cairn errors whose message says what to do.

Every error carries the HTTP status PVE gave (0 when no answer came), the reason phrase, the
full `message` when the server sent one, and a 400's per-parameter `errors`. `text` is the one
sentence cairn shows: it names the missing privilege on a 403 when PVE said which.
"""

from __future__ import annotations

from actors.vm.pveapi.wire import ErrorBody, Missing, missing_privilege

# AnyEvent::HTTP pseudo-statuses: the request may never have reached the handler (595 connect,
# 596 TLS/request/headers, 597 body, 599 other): retrying them cannot double a change.
PROXY_STATUSES = frozenset({595, 596, 597, 598, 599})


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        reason: str,
        *,
        message: str | None = None,
        errors: dict[str, str] | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.errors = dict(errors or {})
        self.method = method
        self.path = path
        super().__init__(self.text)

    @property
    def detail(self) -> str:
        """PVE's own words: the reason phrase, a longer `message`, each bad parameter."""
        text = self.reason.strip()
        if self.message and self.message.strip() not in (text, ""):
            extra = self.message.strip()
            text = extra if extra.startswith(text) else f"{text} {extra}".strip()
        if self.errors:
            text += " " + "; ".join(f"{k}: {v}" for k, v in sorted(self.errors.items()))
        return text

    @property
    def text(self) -> str:
        return self.detail

    @property
    def retryable(self) -> bool:
        """May the same request be sent again without doing anything twice? Only when PVE
        never ran it (59x from a proxy hop) or nothing answered at all."""
        return self.status in PROXY_STATUSES or self.status == 0

    @property
    def not_found(self) -> bool:
        """BPG's rule: 404, or a message saying the thing does not exist (PVE says 500)."""
        low = self.detail.lower()
        return self.status == 404 or any(
            s in low for s in ("does not exist", "no such resource", "no such file or directory")
        )


class Unreachable(ApiError):
    """No HTTP answer: connection refused, time-out, TLS handshake failure."""

    @property
    def text(self) -> str:
        return f"pveproxy is not reachable: {self.reason}"


class FingerprintMismatch(ApiError):
    """The server's certificate is not the pinned one: nothing was sent."""

    def __init__(self, expected: str, got: str, url: str) -> None:
        self.expected = expected
        self.got = got
        super().__init__(0, "certificate fingerprint mismatch", path=url)

    @property
    def text(self) -> str:
        return (
            f"refused to talk to {self.path}: its certificate's SHA-256 fingerprint is {self.got}, "
            f"not {self.expected} (PVE_API_FINGERPRINT). If the node's certificate was renewed, "
            "check it with `pvenode cert info` on the node and update PVE_API_FINGERPRINT; "
            "otherwise something else answers at that address"
        )

    @property
    def retryable(self) -> bool:
        return False


class AuthFailed(ApiError):
    @property
    def text(self) -> str:
        why = self.reason.strip() or "Unauthorized"
        return (
            f"pveproxy refused the API token ({self.status} {why}): "
            "check PVE_API_TOKEN (USER@REALM!TOKENID=SECRET), that the user and the token exist, "
            "are enabled and not expired"
        )


class PermissionDenied(ApiError):
    @property
    def missing(self) -> Missing | None:
        return missing_privilege(self.detail)

    @property
    def text(self) -> str:
        found = self.missing
        if found is None:
            return f"permission denied by Proxmox VE: {self.detail}"
        return (
            f"permission denied by Proxmox VE: the API token lacks {found.privilege} on "
            f"{found.path} ({self.detail}); `cairn pve bootstrap` prints the ACLs cairn needs"
        )


class TaskFailed(ApiError):
    """A task that started (HTTP 200, a UPID) and ended in error: `exitstatus` is the error."""

    def __init__(self, upid: str, exitstatus: str, log: list[str]) -> None:
        self.upid = upid
        self.exitstatus = exitstatus
        self.log = list(log)
        super().__init__(200, exitstatus)

    @property
    def text(self) -> str:
        return self.exitstatus


def from_response(
    status: int, reason: str, body: ErrorBody, *, method: str = "", path: str = ""
) -> ApiError:
    cls: type[ApiError] = ApiError
    if status == 401:
        cls = AuthFailed
    elif status == 403:
        cls = PermissionDenied
    return cls(status, reason, message=body.message, errors=body.errors, method=method, path=path)
