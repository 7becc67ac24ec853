"""What the shape runners share in one bench run: the settings, the temp dir, the report,
the bare handler and the main SQLite coordinator (started on first use, stopped at the end),
and the figures a later row quotes beside its own (PostgreSQL beside SQLite)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.load import Cycles
from bench.report import Report
from bench.servers import ServerProcess, start_bare, start_coordinator, write_config
from bench.settings import Settings

MAIN_MAX_LANES = 20_000
MAIN_MAX_CONNECTIONS = 4_000  # parked awaits hold a connection each


@dataclass(slots=True)
class Context:
    s: Settings
    tmp: Path
    report: Report
    figures: dict[str, Cycles] = field(default_factory=dict)  # SQLite's, by row key
    _bare: ServerProcess | None = None
    _main: ServerProcess | None = None

    def config(self, name: str) -> Path:
        """A config with room for every lane and connection a shape makes."""
        return write_config(
            self.tmp / f"{name}.toml",
            max_lanes=MAIN_MAX_LANES,
            max_connections=MAIN_MAX_CONNECTIONS,
        )

    def bare(self) -> ServerProcess:
        if self._bare is None:
            self._bare = start_bare(self.tmp)
        return self._bare

    def main(self) -> ServerProcess:
        """The SQLite coordinator of the throughput and hand-off shapes."""
        if self._main is None:
            self._main = start_coordinator(self.tmp, "sqlite", self.config("sqlite"))
        return self._main

    def close(self) -> None:
        for srv in (self._main, self._bare):
            if srv is not None:
                srv.stop()
        self._main = self._bare = None
