-- The task queues and workers the coordinator has seen, as Taskcluster keeps them: written
-- from claims, claimWork polls, reclaims, createTask and declareWorker (batched, about once a
-- second), read by the task-queue, provisioner and worker endpoints, deleted once expired.
CREATE TABLE task_queues (
    provisioner_id   TEXT NOT NULL,
    worker_type      TEXT NOT NULL,
    expires          INTEGER NOT NULL,
    last_date_active INTEGER NOT NULL,
    description      TEXT NOT NULL DEFAULT '',
    stability        TEXT NOT NULL DEFAULT 'experimental',
    PRIMARY KEY (provisioner_id, worker_type)
) WITHOUT ROWID;
CREATE INDEX task_queues_by_expires ON task_queues (expires);

-- recent_tasks: JSON [{taskId, runId}], the last 20 claims, oldest first.
-- quarantine_details: JSON [{clientId, updatedAt, quarantineUntil, quarantineInfo}], one per
-- quarantineWorker call. quarantine_until lies in the past (first_claim - 10 years) for a
-- worker never quarantined, as in Taskcluster; its index serves the per-second reload of the
-- quarantined workers.
CREATE TABLE workers (
    provisioner_id     TEXT NOT NULL,
    worker_type        TEXT NOT NULL,
    worker_group       TEXT NOT NULL,
    worker_id          TEXT NOT NULL,
    first_claim        INTEGER NOT NULL,
    last_date_active   INTEGER NOT NULL,
    expires            INTEGER NOT NULL,
    quarantine_until   INTEGER NOT NULL,
    quarantine_details TEXT NOT NULL,
    recent_tasks       TEXT NOT NULL,
    PRIMARY KEY (provisioner_id, worker_type, worker_group, worker_id)
) WITHOUT ROWID;
CREATE INDEX workers_by_quarantine ON workers (quarantine_until);
CREATE INDEX workers_by_expires ON workers (expires);

