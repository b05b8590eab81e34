"""What the Symphony worker needs to know about its Symphony application (besides the worker's own settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_SESSION_TYPE = "RecoverableAllHistoricalData"
DEFAULT_USER = "Guest"


@dataclass(frozen=True)
class SymphonySettings:
    application: str  # as registered with soamreg: the first argument of soamapi.connect
    base_concurrency: int
    session_type: str = DEFAULT_SESSION_TYPE  # a <SessionTypes><Type name=...> of the application's profile
    user: str = DEFAULT_USER
    password: str = field(default=DEFAULT_USER, repr=False)

    def __post_init__(self) -> None:
        if not self.application:
            raise ValueError("the Symphony application's name is empty")
        if self.base_concurrency < 1:
            raise ValueError(f"base concurrency must be at least 1, not {self.base_concurrency}")
