"""The fake Symphony's API under the name ``soamapi`` (see `soamapi_fake`)."""

from soamapi_fake.api import *  # noqa: F403
from soamapi_fake.api import __all__  # noqa: F401
