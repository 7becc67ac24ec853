-- 0002_receipt_verified: the coordinator now recomputes each receipt's hash.
-- Rows stored before this migration hold no verdict and read null.
ALTER TABLE receipts ADD COLUMN content_hash_verified INTEGER
  CHECK (content_hash_verified IS NULL OR content_hash_verified IN (0, 1));
