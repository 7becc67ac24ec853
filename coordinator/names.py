"""Lane names: the rules and the lane -> file-name mapping live in `coordinator.protocol.names`
(the client applies them too); importable from here."""

from __future__ import annotations

from coordinator.protocol.names import (
    LANE_FILE_SUFFIX,
    LANE_RE,
    MACHINE_RE,
    PART_RE,
    lane_file_name,
    lane_from_file_name,
    parse_lane,
)

__all__ = [
    "LANE_FILE_SUFFIX",
    "LANE_RE",
    "MACHINE_RE",
    "PART_RE",
    "lane_file_name",
    "lane_from_file_name",
    "parse_lane",
]
