"""The gateway's errors: part of gem's one hierarchy (:class:`gem_core.errors.GemCoreError`), each with its HTTP answer.

Every refusal the gateway sends is one of these, as OpenAI's error body
(``{"error": {"message", "type", "code", "param"}}``) with the class's HTTP status, so a
harness's SDK raises its own typed error (``openai.BadRequestError``, ``RateLimitError``...).
"""

from __future__ import annotations

from typing import Any, ClassVar

from gem_core.errors import GemCoreError

__all__ = [
    "BadRequest",
    "GatewayError",
    "GatewayOverloaded",
    "GenerateFailed",
    "GenerateTimedOut",
    "NotFound",
    "SessionClosed",
    "SessionLimit",
    "Unauthorized",
]


class GatewayError(GemCoreError):
    """A request the gateway refused or could not answer; ``status`` and ``kind`` make the HTTP answer."""

    status: ClassVar[int] = 500
    kind: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def body(self) -> dict[str, Any]:
        """OpenAI's error body for this error."""
        return {"error": {"message": str(self), "type": self.kind, "code": type(self).__name__, "param": self.param}}


class BadRequest(GatewayError, ValueError):
    """The request body is not a chat completion the gateway serves (the message names the field and the fix)."""

    status = 400
    kind = "invalid_request_error"


class Unauthorized(GatewayError):
    """An admin call without the admin token (only the trainer ends episodes and sets rewards)."""

    status = 401
    kind = "authentication_error"


class NotFound(GatewayError, LookupError):
    """No such route or session (chat calls go to ``/s/<session>/v1/chat/completions``)."""

    status = 404
    kind = "not_found_error"


class SessionClosed(GatewayError):
    """A call into a session whose episode was already finished (ended by the trainer)."""

    status = 409
    kind = "invalid_request_error"


class SessionLimit(GatewayError):
    """A new session beyond ``max_sessions`` or a call beyond ``max_calls_per_session``."""

    status = 429
    kind = "rate_limit_error"


class GatewayOverloaded(GatewayError):
    """The request waited longer than its timeout for a free generation slot."""

    status = 503
    kind = "server_error"


class GenerateTimedOut(GatewayError, TimeoutError):
    """The generate function did not answer within ``request_timeout_s``."""

    status = 504
    kind = "server_error"


class GenerateFailed(GatewayError):
    """The generate function raised or broke its contract (its error is chained and named)."""

    status = 502
    kind = "server_error"
