"""The course's drawing style, shared by every plot: picture size and density, the colours and the legend place."""

from __future__ import annotations

from typing import Any

__all__ = ["DPI", "PIXEL_RATIO", "SEEN", "UNSEEN", "JUMP", "HOLD", "DIM_COLORS", "LEGEND_ABOVE"]

DPI = 80  # dots per inch of live pictures: 8 inches are 640 (CSS) pixels, readable, and quick to draw and encode
PIXEL_RATIO = 2  # a widget's picture has 2 x 2 device pixels per CSS pixel: sharp on high-density screens too

SEEN = "#1f77b4"
UNSEEN = "#c7c7c7"
JUMP = "#d62728"
HOLD = "#7f7f7f"
DIM_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]  # output dimensions drawn side by side
LEGEND_ABOVE: dict[str, Any] = dict(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, frameon=False)
