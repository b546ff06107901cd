"""``with`` / ``async with`` for the public clients, stated once: entering starts the client
and returns it, leaving closes it (whatever the exception)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.Self is 3.11+; the package supports 3.10
    from typing_extensions import Self

__all__ = ["Lifecycle"]


class Lifecycle:
    """Base of a client with ``start``/``close`` and their ``_async`` twins: ``__enter__`` and
    ``__exit__`` call the first two, ``__aenter__`` and ``__aexit__`` the twins."""

    if TYPE_CHECKING:

        def start(self) -> Self: ...
        async def start_async(self) -> Self: ...
        def close(self) -> object: ...
        async def close_async(self) -> object: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: object, tb: object
    ) -> None:
        await self.close_async()
