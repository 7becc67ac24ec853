"""lane-coordinator: a lease service for shared provider accounts."""

__version__ = "0.1.0"
