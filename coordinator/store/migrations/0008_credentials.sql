-- 0008_credentials: the name of the credential behind every write (docs/protocol.md#credentials).
-- A ticket records the credential whose acquire created it and the one whose release made it
-- done; a receipt its writer's; an incident the credential whose call caused it (null: the
-- lane's clock); the pause its reporter's. Rows written before this migration read null.
-- Only columns are added: it applies after any migration that adds others.
ALTER TABLE tickets ADD COLUMN credential TEXT;
ALTER TABLE tickets ADD COLUMN released_by TEXT;
ALTER TABLE receipts ADD COLUMN credential TEXT;
ALTER TABLE incidents ADD COLUMN credential TEXT;
ALTER TABLE pause ADD COLUMN credential TEXT;
