-- task-group-resolved in the transaction that resolves a group's last unresolved task
-- (docs/events.md). A resolving write with publishing on calls this for its task's group,
-- naming the tasks it resolves (its own writes may not be visible to the function's queries).
-- Resolutions of one group take turns on a transaction-scoped advisory lock (creates, which
-- lock the group row, do not wait for it); each looks for an unresolved task with a snapshot
-- taken after the turns before it committed, so of the last resolutions exactly one finds
-- none and announces it. Returns 1 if it wrote the message.
CREATE FUNCTION queue_task_group_resolved(p_group TEXT, p_resolved TEXT[]) RETURNS INTEGER
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    g task_groups%ROWTYPE;
BEGIN
    -- 26: the Pulse issue's number, so no other advisory lock shares the key space
    PERFORM pg_advisory_xact_lock(26, hashtext(p_group));
    IF EXISTS (
        SELECT 1 FROM tasks
        WHERE task_group_id = p_group AND open_deadline IS NOT NULL
              AND task_id <> ALL (p_resolved)
    ) THEN
        RETURN 0;
    END IF;
    SELECT * INTO g FROM task_groups WHERE task_group_id = p_group;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- the body of coordinator.domain.events.group_event: the group as getTaskGroup answers
    INSERT INTO queue_event_outbox (event_key, exchange, routing_key, cc, body)
    VALUES (
        g.task_group_id,
        'task-group-resolved',
        'primary.' || g.task_group_id || '.' || g.scheduler_id || '._',
        '[]',
        (jsonb_build_object(
            'version', 1,
            'taskGroupId', g.task_group_id,
            'schedulerId', g.scheduler_id,
            'expires', queue_iso(g.expires)
        ) || CASE WHEN g.sealed IS NULL THEN '{}'::jsonb
                  ELSE jsonb_build_object('sealed', queue_iso(g.sealed)) END)::text
    );
    RETURN 1;
END
$$;

-- Epoch milliseconds as Taskcluster writes a time (coordinator.domain.records.to_iso).
CREATE FUNCTION queue_iso(ms BIGINT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(TIMESTAMP 'epoch' + ms * INTERVAL '1 millisecond',
                   'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
