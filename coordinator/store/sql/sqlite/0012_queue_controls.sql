-- What operators set on a task queue (docs/operations.md): a pause (paused_since, the
-- operator's paused_reason) and limits (max_running, max_claims_per_second; NULL is none).
-- claims_tat_us is the rate limit's state: the theoretical arrival time of the next claim,
-- epoch microseconds. Rows are kept whether or not the queue is still listed in task_queues.
CREATE TABLE task_queue_controls (
    provisioner_id        TEXT NOT NULL,
    worker_type           TEXT NOT NULL,
    paused_since          INTEGER,
    paused_reason         TEXT,
    max_running           INTEGER,
    max_claims_per_second REAL,
    claims_tat_us         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (provisioner_id, worker_type)
) WITHOUT ROWID;
