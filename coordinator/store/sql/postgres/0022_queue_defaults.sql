-- A task queue's defaults (docs/operations.md): the claim timeout of its tasks without a
-- claimTimeout, and how long its completed and its failed or exception tasks are kept after
-- they resolved, in seconds; NULL is the coordinator's.
ALTER TABLE task_queue_controls ADD COLUMN claim_timeout_s INTEGER;
ALTER TABLE task_queue_controls ADD COLUMN completed_ttl_s BIGINT;
ALTER TABLE task_queue_controls ADD COLUMN failed_ttl_s BIGINT;
