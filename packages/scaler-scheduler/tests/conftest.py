"""The scheduler's unit tests share the core's helpers (test_scheduler_core.py)."""

import os
import sys

# pytest runs with --import-mode=importlib, which puts no test directory on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
