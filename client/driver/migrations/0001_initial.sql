-- 0001_initial: the live-job record, one row per render window. Never edit an applied
-- migration; add a new numbered one. IF NOT EXISTS: a journal written before migrations were
-- numbered already has this table and takes the migration as applied.
CREATE TABLE IF NOT EXISTS windows (
    lane            TEXT NOT NULL,
    project         TEXT NOT NULL,
    scene           TEXT NOT NULL,
    prompt_hash     TEXT NOT NULL,
    attempt_id      TEXT NOT NULL,
    ticket_id       TEXT,
    machine_id      TEXT,
    claim_id        TEXT,
    fence           INTEGER,
    provider_job_id TEXT,
    phase           TEXT NOT NULL CHECK (phase IN
        ('acquired', 'submitting', 'submitted', 'submit-unknown', 'terminal', 'lease-lost')),
    needs           TEXT,
    outcome         TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    PRIMARY KEY (lane, project, scene, prompt_hash)
) WITHOUT ROWID;
