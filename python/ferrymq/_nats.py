"""The ``credentials`` argument of the ``nats://`` facades."""

from __future__ import annotations

from .exceptions import InvalidArgumentError

__all__ = ["user_password"]


def user_password(credentials: object) -> tuple[str | None, str | None]:
    """``credentials`` of a ``nats://`` facade: ``None`` or ``(user, password)``."""
    if credentials is None:
        return None, None
    if not (
        isinstance(credentials, tuple)
        and len(credentials) == 2
        and all(isinstance(c, str) for c in credentials)
    ):
        raise InvalidArgumentError(
            "credentials: a nats:// endpoint takes (user, password) or token="
        )
    user, password = credentials
    return user, password
