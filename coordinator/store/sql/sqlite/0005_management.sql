-- The management API (listTasks, countTasks, cancelTasks, deleteTasks) and the outcome TTLs
-- filter on columns copied from the definition when the task is inserted (project_id,
-- created), on the last run's resolution time (resolved, written by compare-and-set), and on
-- tags, one row per tag. Every filter is served by an index; listings page by task_id, so
-- each index ends with it where the filter is an equality. A tag key cannot hold ':' in a
-- filter (tag=<key>:<value> splits at the first one) but is stored whole.
ALTER TABLE tasks ADD COLUMN project_id TEXT NOT NULL DEFAULT 'none';
ALTER TABLE tasks ADD COLUMN created INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN resolved INTEGER;
UPDATE tasks SET
    project_id = coalesce(json_extract(definition, '$.projectId'), 'none'),
    created = CAST(round(
        (julianday(json_extract(definition, '$.created')) - 2440587.5) * 86400000.0
    ) AS INTEGER),
    resolved = CASE WHEN state IN ('completed', 'failed', 'exception')
                    THEN json_extract(runs, '$[#-1].resolved') END;

-- A task's tags go with it (ON DELETE CASCADE): every way of deleting tasks (expiry, the
-- outcome TTLs, deleteTasks) deletes only from tasks.
CREATE TABLE task_tags (
    task_id   TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    tag_key   TEXT NOT NULL,
    tag_value TEXT NOT NULL,
    PRIMARY KEY (tag_key, tag_value, task_id)
) WITHOUT ROWID;
CREATE INDEX task_tags_by_task ON task_tags (task_id);
INSERT INTO task_tags (task_id, tag_key, tag_value)
SELECT tasks.task_id, tag.key, tag.value
FROM tasks, json_each(tasks.definition, '$.tags') AS tag;

DROP INDEX tasks_by_queue_state;
-- visible_at rides along so a queue's counts (pending against delayed) read the index only
CREATE INDEX tasks_by_queue_state
    ON tasks (provisioner_id, worker_type, state, task_id, visible_at);
CREATE INDEX tasks_by_scheduler ON tasks (scheduler_id, task_id);
CREATE INDEX tasks_by_project ON tasks (project_id, task_id);
CREATE INDEX tasks_by_created ON tasks (created);
-- Written once per task, when it resolves: the resolved-time filters, and the outcome-TTL
-- sweep, which asks for one outcome's tasks resolved before a cutoff.
CREATE INDEX tasks_by_resolved ON tasks (resolved) WHERE resolved IS NOT NULL;
CREATE INDEX tasks_resolved_by_state ON tasks (state, resolved) WHERE resolved IS NOT NULL;

-- The key that signs continuation tokens, made on first use.
CREATE TABLE shared_secrets (
    name   TEXT PRIMARY KEY,
    secret TEXT NOT NULL
);
