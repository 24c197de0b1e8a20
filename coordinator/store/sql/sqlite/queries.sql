-- name: insert_task
INSERT INTO tasks (task_id, task_group_id, scheduler_id, provisioner_id, worker_type, expires,
                   definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
                   visible_at, pending_priority, notify_dependents, project_id, created,
                   resolved, traceparent, concurrency_key, version)
VALUES (:task_id, :task_group_id, :scheduler_id, :provisioner_id, :worker_type, :expires,
        :definition, :retries_left, :runs, :state, :taken_until, :open_deadline, :hint_due,
        :visible_at, :pending_priority, :notify_dependents, :project_id, :created, :resolved,
        :traceparent, :concurrency_key, 1)
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

-- name: resolved_task_group
-- The group if none of its tasks is left unresolved (the counts of 0026_unresolved_counts).
SELECT task_group_id, scheduler_id, expires, sealed FROM task_groups
WHERE task_group_id = :task_group_id AND unresolved = 0

-- name: count_unresolved
-- Kept in the transaction of every write that adds, resolves, reopens or deletes a task.
UPDATE task_groups SET unresolved = unresolved + :delta WHERE task_group_id = :task_group_id

-- name: unresolved_by_group
-- Reads the unresolved tasks only: left to itself, the planner walks every task in group
-- order to spare the GROUP BY its sort (300 ms against 1 ms at 52,000 tasks, 1,000 of them
-- unresolved).
SELECT task_group_id, count(*) FROM tasks INDEXED BY tasks_by_open_deadline
WHERE open_deadline IS NOT NULL GROUP BY task_group_id

-- name: counting_groups
SELECT task_group_id, unresolved FROM task_groups WHERE unresolved <> 0

-- name: unresolved_to_delete
SELECT task_group_id, count(*) FROM tasks
WHERE task_id IN ({ids}) AND open_deadline IS NOT NULL GROUP BY task_group_id

-- name: insert_dependency
INSERT INTO task_dependencies (required_task_id, dependent_task_id)
VALUES (:required_task_id, :dependent_task_id)

-- name: insert_tag
INSERT INTO task_tags (task_id, tag_key, tag_value) VALUES (:task_id, :tag_key, :tag_value)

-- name: get_many
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks WHERE task_id IN ({ids})

-- name: states
SELECT task_id, state FROM tasks WHERE task_id IN ({ids})

-- name: runs_of
SELECT task_id, runs FROM tasks WHERE task_id IN ({ids})

-- name: stored_statuses
-- What compare_and_set compares the new statuses with, in its transaction.
SELECT task_id, retries_left, runs, state, taken_until, open_deadline, hint_due, visible_at,
       pending_priority, resolved, notify_dependents, version
FROM tasks WHERE task_id IN ({ids})

-- name: with_dependents
-- notify_dependents is kept only for a task that has dependents, so resolving one without
-- any costs no dependency pass; a dependent created later checks the states itself. These
-- are the ids among {ids} that have one, read in the compare-and-set's transaction.
SELECT DISTINCT required_task_id FROM task_dependencies WHERE required_task_id IN ({ids})

-- name: compare_and_set
-- The assignments are `column = :column, ` for each status column whose value changes, and
-- `definition = :definition, ` when a transition changed it (a new priority). SQLite updates
-- every index over a column the SET names, changed or not: naming only the changed ones
-- halves a claim's write. No RETURNING, which SQLite makes costly: the caller read the
-- version in this transaction, and one writer holds the file, so the update stores version + 1.
UPDATE tasks SET {assignments}version = version + 1
WHERE task_id = :task_id AND version = :version

-- name: confirm_hint
UPDATE tasks SET hint_due = NULL
WHERE task_id = :task_id AND hint_due IS NOT NULL
  AND json_extract(runs, '$[#-1].run_id') = :run_id

-- name: tasks_to_notify
SELECT task_id FROM tasks WHERE notify_dependents = 1 LIMIT :limit

-- name: expired_task_ids
SELECT task_id FROM tasks WHERE expires <= :now ORDER BY expires LIMIT :limit

-- name: delete_tasks
DELETE FROM tasks WHERE task_id IN ({ids})

-- name: delete_dependencies
DELETE FROM task_dependencies
WHERE dependent_task_id IN ({ids}) OR required_task_id IN ({ids})

-- name: run_counts
SELECT
    coalesce(sum(state = 'pending' AND coalesce(visible_at, 0) <= :now), 0) AS pending,
    coalesce(sum(state = 'pending' AND visible_at > :now), 0) AS delayed,
    coalesce(sum(state = 'running'), 0) AS running
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND state IN ('pending', 'running')

-- name: upsert_task_queue
INSERT INTO task_queues (provisioner_id, worker_type, expires, last_date_active)
VALUES (:provisioner_id, :worker_type, :expires, :seen)
ON CONFLICT (provisioner_id, worker_type) DO UPDATE
SET expires = max(task_queues.expires, excluded.expires),
    last_date_active = max(task_queues.last_date_active, excluded.last_date_active)

-- name: worker_recent_tasks
SELECT recent_tasks FROM workers
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND worker_group = :worker_group AND worker_id = :worker_id

-- name: upsert_worker
-- recent_tasks comes merged with the stored ones, read in the same transaction.
INSERT INTO workers (provisioner_id, worker_type, worker_group, worker_id, first_claim,
                     last_date_active, expires, quarantine_until, quarantine_details,
                     recent_tasks)
VALUES (:provisioner_id, :worker_type, :worker_group, :worker_id, :seen, :seen, :expires,
        :quarantine_until, '[]', :recent_tasks)
ON CONFLICT (provisioner_id, worker_type, worker_group, worker_id) DO UPDATE
SET last_date_active = max(workers.last_date_active, excluded.last_date_active),
    expires = max(workers.expires, excluded.expires),
    recent_tasks = excluded.recent_tasks

-- name: workers
-- Listed: unexpired or quarantined. A NULL `quarantined` lists both kinds.
SELECT provisioner_id, worker_type, worker_group, worker_id, first_claim, last_date_active,
       expires, quarantine_until, quarantine_details, recent_tasks
FROM workers
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND (worker_group, worker_id) > (:after_worker_group, :after_worker_id)
  AND (expires > :now OR quarantine_until > :now)
  AND (:quarantined IS NULL OR :quarantined = (quarantine_until > :now))
ORDER BY worker_group, worker_id LIMIT :limit

-- name: quarantine_worker
UPDATE workers
SET quarantine_until = :quarantine_until, expires = max(expires, :expires),
    quarantine_details = json_insert(quarantine_details, '$[#]', json(:note))
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND worker_group = :worker_group AND worker_id = :worker_id
RETURNING provisioner_id, worker_type, worker_group, worker_id, first_claim, last_date_active,
          expires, quarantine_until, quarantine_details, recent_tasks

-- name: claimed_runs
-- Running runs are as many as the queue's busy workers: sorting them by the time in the
-- runs JSON costs less than an index every claim would have to maintain.
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM (
    SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
           traceparent,
           json_extract(runs, '$[#-1].started') AS started
    FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type AND state = 'running'
)
WHERE (started, task_id) > (:after_started, :after_task_id)
ORDER BY started, task_id LIMIT :limit

-- name: run_counts_of
-- {queues} is a list of (pN, wN) parameter pairs, one per task queue.
WITH queues (provisioner_id, worker_type) AS (VALUES {queues})
SELECT q.provisioner_id, q.worker_type,
    coalesce(sum(t.state = 'pending' AND coalesce(t.visible_at, 0) <= :now), 0) AS pending,
    coalesce(sum(t.state = 'pending' AND t.visible_at > :now), 0) AS delayed,
    coalesce(sum(t.state = 'running'), 0) AS running
FROM queues q
JOIN tasks t ON t.provisioner_id = q.provisioner_id AND t.worker_type = q.worker_type
WHERE t.state IN ('pending', 'running')
GROUP BY q.provisioner_id, q.worker_type

-- name: resolved_counts_of
-- {queues} as in run_counts_of. Read from tasks_by_resolved, one entry per task resolved
-- since :since whatever the queues kept from before; left to itself the planner scans each
-- queue's whole range of tasks_by_queue instead (a second a million tasks).
WITH queues (provisioner_id, worker_type) AS (VALUES {queues})
SELECT t.provisioner_id, t.worker_type,
    sum(t.state = 'completed') AS completed,
    sum(t.state = 'failed') AS failed,
    sum(t.state = 'exception') AS exception
FROM tasks t INDEXED BY tasks_by_resolved
WHERE t.resolved >= :since
  AND (t.provisioner_id, t.worker_type) IN (SELECT provisioner_id, worker_type FROM queues)
GROUP BY t.provisioner_id, t.worker_type

-- name: insert_shared_secret
INSERT INTO shared_secrets (name, secret) VALUES (:secret_name, :secret)
ON CONFLICT (name) DO NOTHING

-- name: shared_secret
SELECT secret FROM shared_secrets WHERE name = :secret_name

-- name: artifacts_of_tasks
SELECT task_id, run_id, name, storage_type, content_type, content_length, expires, details,
       created
FROM artifacts WHERE task_id IN ({ids})
ORDER BY task_id, run_id, name

-- name: delete_artifact
DELETE FROM artifacts WHERE task_id = :task_id AND run_id = :run_id AND name = :artifact_name

-- name: delete_outbox_events
-- :ids is a JSON array: one statement for the whole batch.
DELETE FROM queue_event_outbox WHERE id IN (SELECT value FROM json_each(:ids))

-- name: claimable_runs
-- Store dispatch's claim: the queue's pending runs visible now, highest priority first, then
-- the earliest visible, from the partial index tasks_claimable (pending rows only). One writer
-- runs at a time, so the caller's compare-and-set in the same transaction always wins: it
-- writes from this status (stored_statuses' columns) without reading the rows again.
SELECT task_id, definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
       visible_at, pending_priority, resolved, notify_dependents, version, traceparent
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND pending_priority IS NOT NULL AND visible_at <= :now AND open_deadline > :now
ORDER BY pending_priority DESC, visible_at LIMIT :limit

-- name: claimable_runs_at_level
-- Store dispatch's weighted claim: the oldest :limit claimable runs of one priority level, as
-- claimable_runs reads them; the caller reads each level and draws how many of each to claim.
SELECT task_id, definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
       visible_at, pending_priority, resolved, notify_dependents, version, traceparent
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND pending_priority = :level AND visible_at <= :now AND open_deadline > :now
ORDER BY visible_at LIMIT :limit

-- name: claimable_keys_at_level
-- A keyed claim (maxRunningPerKey) walks the keys that have pending runs of one priority level,
-- one index seek per key (tasks_claimable_by_key), however long each key's backlog.
WITH RECURSIVE found (key) AS (
    SELECT min(concurrency_key) FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
      AND pending_priority = :level AND concurrency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(concurrency_key) FROM tasks
            WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
              AND pending_priority = :level AND concurrency_key > found.key)
    FROM found WHERE found.key IS NOT NULL
)
SELECT key FROM found WHERE key IS NOT NULL

-- name: claimable_runs_of_key
-- A keyed claim's candidates of one key and level: its :limit earliest visible claimable runs.
SELECT task_id, definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
       visible_at, pending_priority, resolved, notify_dependents, version, traceparent
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND pending_priority = :level AND concurrency_key = :key
  AND visible_at <= :now AND open_deadline > :now
ORDER BY visible_at LIMIT :limit

-- name: claimable_unkeyed_at_level
-- A keyed claim's candidates without a key, of one level: they are found in tasks_claimable
-- past the keyed runs of that level.
SELECT task_id, definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
       visible_at, pending_priority, resolved, notify_dependents, version, traceparent
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND pending_priority = :level AND concurrency_key IS NULL
  AND visible_at <= :now AND open_deadline > :now
ORDER BY visible_at LIMIT :limit

-- name: mark_clients_used
-- used is a JSON object, clientId to time: each raises its client's last_date_used.
UPDATE auth_clients SET last_date_used = u.value
FROM json_each(:used) AS u
WHERE auth_clients.client_id = u.key AND auth_clients.last_date_used < u.value

-- name: delete_roles_except
-- role_ids is a JSON array of roleIds: every other role goes.
DELETE FROM auth_roles WHERE role_id NOT IN (SELECT value FROM json_each(:role_ids))

-- name: get_indexed_tasks
-- findTask's and findTasksAtIndex's entries: :paths is a JSON array of [namespace, name].
SELECT t.namespace, t.name, t.rank, t.task_id, t.data, t.expires
FROM json_each(:paths) AS p
JOIN indexed_tasks AS t
  ON t.namespace = json_extract(p.value, '$[0]') AND t.name = json_extract(p.value, '$[1]')
