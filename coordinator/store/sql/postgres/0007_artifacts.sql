-- Artifacts (createArtifact): one row per name in a task's run. A task's artifacts go with it
-- (ON DELETE CASCADE), so every way of deleting tasks (expiry, the resolved-task TTLs,
-- deleteTasks) still deletes only from tasks and leaves no artifact row behind; the bytes of
-- s3 artifacts are the service's to delete first (artifacts_of_tasks). Names use the "C"
-- collation, as task ids do: listings page with `name > after` in code-point order, as in
-- SQLite. details is compact JSON text, as definitions are.
CREATE TABLE artifacts (
    task_id        TEXT COLLATE "C" NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    run_id         INTEGER NOT NULL,
    name           TEXT COLLATE "C" NOT NULL,
    storage_type   TEXT NOT NULL,
    content_type   TEXT NOT NULL,
    content_length BIGINT,
    expires        BIGINT NOT NULL,
    details        TEXT NOT NULL,
    created        BIGINT NOT NULL,
    PRIMARY KEY (task_id, run_id, name)
);
-- the artifact sweeper's scan
CREATE INDEX artifacts_by_expires ON artifacts (expires);
