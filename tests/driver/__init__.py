"""Driver helper tests (client/driver/: Turn, SyncTurn, journal, receipts, example driver)."""
