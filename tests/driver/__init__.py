"""Driver helper tests (client/driver.py, journal.py, receipts.py, example_driver.py)."""
