"""The test suite: one package (`tests.<folder>`), so every folder imports tests.harness."""
