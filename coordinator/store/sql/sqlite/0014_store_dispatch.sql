-- Store dispatch (docs/dispatch.md): claimWork picks a task queue's claimable runs, highest
-- priority first, then the earliest visible. pending_priority is the priority level (7 for
-- highest down to 1 for lowest) of the pending last run, its retryPriority for an automatic
-- retry of a task that has one; NULL when the last run is not pending. The partial index holds
-- only pending runs, in the order they are claimed.
ALTER TABLE tasks ADD COLUMN pending_priority INTEGER;
UPDATE tasks SET pending_priority = CASE
    CASE WHEN json_extract(runs, '$[#-1].reason_created') IN ('retry', 'task-retry')
         THEN coalesce(json_extract(definition, '$.retryPriority'),
                       json_extract(definition, '$.priority'))
         ELSE json_extract(definition, '$.priority') END
    WHEN 'highest' THEN 7 WHEN 'very-high' THEN 6 WHEN 'high' THEN 5 WHEN 'medium' THEN 4
    WHEN 'low' THEN 3 WHEN 'very-low' THEN 2 ELSE 1 END
WHERE state = 'pending';
CREATE INDEX tasks_claimable
    ON tasks (provisioner_id, worker_type, pending_priority DESC, visible_at)
    WHERE pending_priority IS NOT NULL;
