-- 0005_credentials: the name of the credential behind every write (docs/protocol.md#credentials);
-- the same columns as a lane file's migration 0008. A ticket records the credential whose
-- acquire created it and the one whose release made it done; a receipt its writer's; an
-- incident the credential whose call caused it (null: the lane's clock); the pause its
-- reporter's. Rows written before this migration read null. Only columns are added: it applies
-- after any migration that adds others. Never edit an applied migration; add a new numbered one.
ALTER TABLE tickets
  ADD COLUMN credential TEXT,
  ADD COLUMN released_by TEXT;
ALTER TABLE receipts ADD COLUMN credential TEXT;
ALTER TABLE incidents ADD COLUMN credential TEXT;
ALTER TABLE pauses ADD COLUMN credential TEXT;
