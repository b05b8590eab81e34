"""The number and table formats of the pages run.py and simulator.py write (markdown)."""

from __future__ import annotations

from typing import Any, List


def number(value: Any) -> str:
    """A figure with three significant digits or so ("–" for none)."""
    if not isinstance(value, (int, float)):
        return "–"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(rows: List[List[str]], header: List[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
