"""Storage: every SQL statement of the coordinator lives in this package."""
