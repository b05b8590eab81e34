"""``python -m scaler.storage ADDRESS``: the same as ``scaler_object_storage_server ADDRESS``."""

import sys

from scaler.storage.cli import main

sys.exit(main())
