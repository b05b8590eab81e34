"""The fake Symphony's API under the name ``soamapi`` (see `soamapi_fake`)."""

from soamapi_fake.api import *  # noqa: F403
