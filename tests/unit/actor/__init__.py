"""Unit tests of coordinator/actor: tests/unit/actor/test_<module>.py for each module."""
