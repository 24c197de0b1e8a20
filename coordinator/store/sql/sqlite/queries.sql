-- name: insert_task
INSERT INTO tasks (task_id, task_group_id, scheduler_id, provisioner_id, worker_type, expires,
                   definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
                   visible_at, notify_dependents, version)
VALUES (:task_id, :task_group_id, :scheduler_id, :provisioner_id, :worker_type, :expires,
        :definition, :retries_left, :runs, :state, :taken_until, :open_deadline, :hint_due,
        :visible_at, :notify_dependents, 1)
ON CONFLICT (task_id) DO NOTHING

-- name: upsert_task_group
-- Run in the insert's transaction: no row back means a sealed group, or one of another
-- schedulerId, and the task is then not inserted.
INSERT INTO task_groups (task_group_id, scheduler_id, expires)
VALUES (:task_group_id, :scheduler_id, :expires)
ON CONFLICT (task_group_id) DO UPDATE
    SET expires = max(task_groups.expires, excluded.expires)
    WHERE task_groups.sealed IS NULL AND task_groups.scheduler_id = excluded.scheduler_id
RETURNING task_group_id

-- name: insert_dependency
INSERT INTO task_dependencies (required_task_id, dependent_task_id)
VALUES (:required_task_id, :dependent_task_id)

-- name: get_task
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version
FROM tasks WHERE task_id = :task_id

-- name: get_many
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version
FROM tasks WHERE task_id IN ({ids})

-- name: states
SELECT task_id, state FROM tasks WHERE task_id IN ({ids})

-- name: compare_and_set
-- notify_dependents is kept only for a task that has dependents, so resolving one without
-- any costs no dependency pass; a dependent created later checks the states itself. The
-- definition is written only when a transition changed it (a new priority), else NULL.
UPDATE tasks
SET definition = coalesce(:definition, definition), retries_left = :retries_left, runs = :runs, state = :state, taken_until = :taken_until,
    open_deadline = :open_deadline, hint_due = :hint_due, visible_at = :visible_at,
    notify_dependents = :notify_dependents AND EXISTS (
        SELECT 1 FROM task_dependencies WHERE required_task_id = :task_id
    ),
    version = version + 1
WHERE task_id = :task_id AND version = :version
RETURNING version, notify_dependents

-- name: confirm_hint
UPDATE tasks SET hint_due = NULL
WHERE task_id = :task_id AND hint_due IS NOT NULL
  AND json_extract(runs, '$[#-1].run_id') = :run_id

-- name: expired_claims
SELECT task_id, taken_until FROM tasks
WHERE taken_until IS NOT NULL AND taken_until <= :now
ORDER BY taken_until LIMIT :limit

-- name: past_deadlines
SELECT task_id FROM tasks
WHERE open_deadline IS NOT NULL AND open_deadline <= :now
ORDER BY open_deadline LIMIT :limit

-- name: hints_due
SELECT task_id FROM tasks
WHERE hint_due IS NOT NULL AND hint_due < :before
ORDER BY hint_due LIMIT :limit

-- name: tasks_to_notify
SELECT task_id FROM tasks WHERE notify_dependents = 1 LIMIT :limit

-- name: expired_task_ids
SELECT task_id FROM tasks WHERE expires <= :now ORDER BY expires LIMIT :limit

-- name: delete_tasks
DELETE FROM tasks WHERE task_id IN ({ids})

-- name: delete_dependencies
DELETE FROM task_dependencies
WHERE dependent_task_id IN ({ids}) OR required_task_id IN ({ids})

-- name: task_group
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version
FROM tasks
WHERE task_group_id = :task_group_id AND task_id > :after
ORDER BY task_id LIMIT :limit

-- name: dependents
SELECT t.task_id, t.definition, t.retries_left, t.runs, t.hint_due, t.notify_dependents, t.version
FROM task_dependencies d JOIN tasks t ON t.task_id = d.dependent_task_id
WHERE d.required_task_id = :task_id AND d.dependent_task_id > :after
ORDER BY d.dependent_task_id LIMIT :limit

-- name: run_counts
SELECT
    coalesce(sum(state = 'pending' AND coalesce(visible_at, 0) <= :now), 0) AS pending,
    coalesce(sum(state = 'pending' AND visible_at > :now), 0) AS delayed,
    coalesce(sum(state = 'running'), 0) AS running
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND state IN ('pending', 'running')

-- name: get_task_group
SELECT task_group_id, scheduler_id, expires, sealed
FROM task_groups WHERE task_group_id = :task_group_id

-- name: seal_task_group
-- Idempotent: a sealed group keeps the time it was first sealed.
UPDATE task_groups SET sealed = coalesce(sealed, :now)
WHERE task_group_id = :task_group_id
RETURNING task_group_id, scheduler_id, expires, sealed

-- name: task_group_size
SELECT count(*) FROM tasks WHERE task_group_id = :task_group_id

-- name: unresolved_in_group
SELECT task_id FROM tasks
WHERE task_group_id = :task_group_id AND open_deadline IS NOT NULL AND task_id > :after
ORDER BY task_id LIMIT :limit

-- name: delete_expired_groups
-- A group expires with the last of its tasks (its expires is their latest).
DELETE FROM task_groups WHERE task_group_id IN (
    SELECT task_group_id FROM task_groups WHERE expires <= :now ORDER BY expires LIMIT :limit
)
