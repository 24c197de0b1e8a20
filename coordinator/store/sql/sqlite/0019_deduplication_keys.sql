-- Deduplication keys (docs/protocol.md, "Scheduling fields"): which task holds each
-- (task queue, deduplicationKey). The primary key makes claiming a key a compare-and-set:
-- inserted if absent, or moved from the holder the creator read to the new task, in the
-- transaction that inserts the task. A row expires with its holder.
CREATE TABLE deduplication_keys (
    task_queue_id     TEXT NOT NULL,
    deduplication_key TEXT NOT NULL,
    task_id           TEXT NOT NULL,
    expires           INTEGER NOT NULL,
    PRIMARY KEY (task_queue_id, deduplication_key)
);
-- the expiry sweep's scan
CREATE INDEX deduplication_keys_expiring ON deduplication_keys (expires);
