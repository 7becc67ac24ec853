"""Unit tests of coordinator/engine: one test module per module, named after it."""
