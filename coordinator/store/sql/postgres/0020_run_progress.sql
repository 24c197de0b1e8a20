-- A running run's progress (reportProgress): the last fraction and message its worker sent,
-- one row per run. A task's rows go with it (ON DELETE CASCADE), so every way of deleting
-- tasks (expiry, the resolved-task TTLs, deleteTasks) leaves none behind.
CREATE TABLE run_progress (
    task_id  TEXT COLLATE "C" NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    run_id   INTEGER NOT NULL,
    fraction DOUBLE PRECISION NOT NULL,
    message  TEXT,
    updated  BIGINT NOT NULL,
    PRIMARY KEY (task_id, run_id)
);
