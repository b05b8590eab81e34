"""The helpers of test_scheduler_core.py (a core driven by hand) are shared by the other core tests."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
