"""The fake's exceptions: soamapi's own, and what it embeds for an exception a service raised."""

from __future__ import annotations

from typing import Optional


class SoamException(Exception):
    def __init__(self, message: str = "", embedded: Optional[BaseException] = None, error_code: int = 0) -> None:
        super().__init__(message)
        self._embedded = embedded
        self._error_code = error_code

    def get_embedded_exception(self) -> Optional[BaseException]:
        return self._embedded

    def get_error_code(self) -> int:
        return self._error_code


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
