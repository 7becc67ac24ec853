"""Unit tests of coordinator/engine: tests/unit/engine/test_<module>.py for each module."""
