"""Unit tests of coordinator/actor: one test module per module, named after it."""
