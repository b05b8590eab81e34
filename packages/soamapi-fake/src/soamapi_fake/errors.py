"""The fake's exceptions: soamapi's own, and what it embeds for an exception a service raised."""

from __future__ import annotations

from typing import Optional


class SoamException(Exception):
    """Constructed like any exception; the grid attaches what it embeds (`soam_exception`)."""

    def get_embedded_exception(self) -> Optional[BaseException]:
        return getattr(self, "_embedded", None)

    def get_error_code(self) -> int:
        return 0


class FailureException(SoamException):
    """Raised by a service: the task failed, Symphony may run it again."""


class FatalException(SoamException):
    """Raised by a service: the task failed, Symphony does not run it again."""


class EmbeddedServiceException(Exception):
    """What `SoamException.get_embedded_exception` gives for an exception a service raised: only its type's name
    and its message survive, in a type of the API (the pessimistic reading of what a real grid embeds), so a
    client that lets it travel to a machine without soamapi is caught by the tests."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


def soam_exception(text: str, embedded: Optional[BaseException]) -> SoamException:
    error = SoamException(text)
    error._embedded = embedded  # type: ignore[attr-defined]
    return error
