-- Concurrency keys (docs/dispatch.md, "Concurrency keys"): a task's concurrencyKey (NULL: none),
-- written once at insert; a task queue's maxRunningPerKey (NULL: no limit). A claim of a queue
-- with the limit counts its running runs per key (tasks_running_by_key), finds the keys that
-- have claimable runs (tasks_claimable_by_key, a walk over its distinct keys) and serves them
-- in turn. Both indexes hold keyed tasks only, so tasks without a key cost what they did.
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
ALTER TABLE task_queue_controls ADD COLUMN max_running_per_key INTEGER;
CREATE INDEX tasks_claimable_by_key
    ON tasks (provisioner_id, worker_type, pending_priority, concurrency_key, visible_at)
    WHERE pending_priority IS NOT NULL AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_running_by_key ON tasks (provisioner_id, worker_type, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
-- Whose turn it is: per task queue and key ('' for the queue's tasks without a key), the
-- claim sequence number of its last run claimed; the key served longest ago goes first. A row
-- expires with the last task claimed for it.
CREATE TABLE concurrency_key_turns (
    provisioner_id  TEXT NOT NULL,
    worker_type     TEXT NOT NULL,
    concurrency_key TEXT NOT NULL,
    served          BIGINT NOT NULL,
    expires         BIGINT NOT NULL,
    PRIMARY KEY (provisioner_id, worker_type, concurrency_key)
);
CREATE INDEX concurrency_key_turns_expiring ON concurrency_key_turns (expires);
