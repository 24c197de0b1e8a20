-- Store dispatch (docs/dispatch.md): claimWork picks a task queue's claimable runs, highest
-- priority first, then the earliest visible, FOR UPDATE SKIP LOCKED. pending_priority is the
-- priority level (7 for highest down to 1 for lowest) of the pending last run, its
-- retryPriority for an automatic retry of a task that has one; NULL when the last run is not
-- pending. The partial index holds only pending runs, in the order they are claimed.
ALTER TABLE tasks ADD COLUMN pending_priority SMALLINT;
UPDATE tasks SET pending_priority = CASE
    CASE WHEN CAST(runs AS jsonb) -> -1 ->> 'reason_created' IN ('retry', 'task-retry')
         THEN coalesce(CAST(definition AS jsonb) ->> 'retryPriority',
                       CAST(definition AS jsonb) ->> 'priority')
         ELSE CAST(definition AS jsonb) ->> 'priority' END
    WHEN 'highest' THEN 7 WHEN 'very-high' THEN 6 WHEN 'high' THEN 5 WHEN 'medium' THEN 4
    WHEN 'low' THEN 3 WHEN 'very-low' THEN 2 ELSE 1 END
WHERE state = 'pending';
CREATE INDEX tasks_claimable
    ON tasks (provisioner_id, worker_type, pending_priority DESC, visible_at)
    WHERE pending_priority IS NOT NULL;
