-- Artifacts (createArtifact): one row per name in a task's run. A task's artifacts go with it
-- (ON DELETE CASCADE), so every way of deleting tasks (expiry, the resolved-task TTLs,
-- deleteTasks) still deletes only from tasks and leaves no artifact row behind; the bytes of
-- s3 artifacts are the service's to delete first (artifacts_of_tasks). details is compact JSON
-- text, as definitions are. An ordinary rowid table: an error artifact's message may take
-- 4 KB, too large a row for WITHOUT ROWID.
CREATE TABLE artifacts (
    task_id        TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    run_id         INTEGER NOT NULL,
    name           TEXT NOT NULL,
    storage_type   TEXT NOT NULL,
    content_type   TEXT NOT NULL,
    content_length INTEGER,
    expires        INTEGER NOT NULL,
    details        TEXT NOT NULL,
    created        INTEGER NOT NULL,
    PRIMARY KEY (task_id, run_id, name)
);
-- the artifact sweeper's scan
CREATE INDEX artifacts_by_expires ON artifacts (expires);
