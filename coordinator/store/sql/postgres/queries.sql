-- Parameters are written :name, as in the SQLite driver; coordinator.store.postgres rewrites
-- them to asyncpg's $1, $2, ... when the file is loaded. `::` casts are left alone.

-- name: lock_migrations
-- Serialises replicas that start at once; released when the migration transaction ends.
-- The key is an arbitrary constant: 'queue-co' in ASCII.
SELECT pg_advisory_xact_lock(8175498151003530095)

-- name: lock_task_queue
-- A task queue's claim lock (Store.queue_lock), held by a session across statements. The
-- two-integer form keeps these keys apart from the migrations' one-integer key; space is
-- 'qc' in ASCII, key a hash of the taskQueueId (two queues sharing one only wait for each
-- other).
SELECT pg_advisory_lock(:space, :key)

-- name: unlock_task_queue
SELECT pg_advisory_unlock(:space, :key)

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name    TEXT NOT NULL,
    applied BIGINT NOT NULL
)

-- name: applied_migrations
SELECT version FROM schema_migrations

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied)
VALUES (:version, :name, CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT))

-- name: insert_task
-- One statement, so the group, the task and its edges are written atomically in one round
-- trip. The group row is upserted first and locked: a sealed group, or one of another
-- schedulerId, returns no row, and then no task is inserted. Returns 1 if inserted, 0 if the
-- id existed or the group refused the task.
WITH grp AS (
    INSERT INTO task_groups (task_group_id, scheduler_id, expires)
    VALUES (:task_group_id, :scheduler_id, :expires)
    ON CONFLICT (task_group_id) DO UPDATE
        SET expires = greatest(task_groups.expires, excluded.expires)
        WHERE task_groups.sealed IS NULL AND task_groups.scheduler_id = excluded.scheduler_id
    RETURNING task_group_id
), task AS (
    INSERT INTO tasks (task_id, task_group_id, scheduler_id, provisioner_id, worker_type,
                       expires, definition, retries_left, runs, state, taken_until,
                       open_deadline, hint_due, visible_at, pending_priority,
                       notify_dependents, project_id, created, resolved, traceparent,
                       concurrency_key, version)
    SELECT :task_id, :task_group_id, :scheduler_id, :provisioner_id, :worker_type, :expires,
           :definition, :retries_left, :runs, :state, :taken_until, :open_deadline, :hint_due,
           :visible_at, CAST(:pending_priority AS SMALLINT), :notify_dependents, :project_id,
           :created, :resolved, CAST(:traceparent AS TEXT), CAST(:concurrency_key AS TEXT), 1
    FROM grp
    ON CONFLICT (task_id) DO NOTHING
    RETURNING task_id
), edges AS (
    INSERT INTO task_dependencies (required_task_id, dependent_task_id)
    SELECT required.task_id, task.task_id
    FROM task, unnest(CAST(:dependencies AS TEXT[])) AS required (task_id)
), tags AS (
    INSERT INTO task_tags (task_id, tag_key, tag_value)
    SELECT task.task_id, tag.tag_key, tag.tag_value
    FROM task, unnest(CAST(:tag_keys AS TEXT[]), CAST(:tag_values AS TEXT[]))
         AS tag (tag_key, tag_value)
)
SELECT count(*) FROM task

-- name: insert_tasks
-- createTasks: every new task, its group and its edges in one statement, so one round trip
-- and one transaction. Groups are upserted (and locked) once each, as insert_task does; tasks
-- whose group refused them are not inserted, edges only for tasks that were. Returns the
-- inserted ids.
WITH new AS (
    SELECT * FROM unnest(
        CAST(:task_id_values AS TEXT[]), CAST(:task_group_id_values AS TEXT[]),
        CAST(:scheduler_id_values AS TEXT[]), CAST(:provisioner_id_values AS TEXT[]),
        CAST(:worker_type_values AS TEXT[]), CAST(:expires_values AS BIGINT[]),
        CAST(:definition_values AS TEXT[]), CAST(:retries_left_values AS INTEGER[]),
        CAST(:runs_values AS TEXT[]), CAST(:state_values AS TEXT[]),
        CAST(:taken_until_values AS BIGINT[]), CAST(:open_deadline_values AS BIGINT[]),
        CAST(:hint_due_values AS BIGINT[]),
        CAST(:visible_at_values AS BIGINT[]), CAST(:pending_priority_values AS SMALLINT[]),
        CAST(:notify_dependents_values AS BOOLEAN[]),
        CAST(:project_id_values AS TEXT[]), CAST(:created_values AS BIGINT[]),
        CAST(:resolved_values AS BIGINT[]), CAST(:traceparent_values AS TEXT[]),
        CAST(:concurrency_key_values AS TEXT[])
    ) AS n (task_id, task_group_id, scheduler_id, provisioner_id, worker_type, expires,
            definition, retries_left, runs, state, taken_until, open_deadline, hint_due,
            visible_at, pending_priority, notify_dependents, project_id, created, resolved,
            traceparent, concurrency_key)
), grp AS (
    INSERT INTO task_groups (task_group_id, scheduler_id, expires)
    -- one row per group: a batch naming one group with two schedulerIds gets the first
    SELECT DISTINCT ON (task_group_id) task_group_id, scheduler_id, max(expires)
    FROM new GROUP BY task_group_id, scheduler_id ORDER BY task_group_id, scheduler_id
    ON CONFLICT (task_group_id) DO UPDATE
        SET expires = greatest(task_groups.expires, excluded.expires)
        WHERE task_groups.sealed IS NULL AND task_groups.scheduler_id = excluded.scheduler_id
    RETURNING task_group_id, scheduler_id
), task AS (
    INSERT INTO tasks (task_id, task_group_id, scheduler_id, provisioner_id, worker_type,
                       expires, definition, retries_left, runs, state, taken_until,
                       open_deadline, hint_due, visible_at, pending_priority,
                       notify_dependents, project_id, created, resolved, traceparent,
                       concurrency_key, version)
    SELECT new.*, 1 FROM new JOIN grp USING (task_group_id, scheduler_id)
    ON CONFLICT (task_id) DO NOTHING
    RETURNING task_id
), edges AS (
    INSERT INTO task_dependencies (required_task_id, dependent_task_id)
    SELECT edge.required, edge.dependent
    FROM unnest(CAST(:required_task_ids AS TEXT[]), CAST(:dependent_task_ids AS TEXT[]))
         AS edge (required, dependent)
    JOIN task ON task.task_id = edge.dependent
), tags AS (
    INSERT INTO task_tags (task_id, tag_key, tag_value)
    SELECT tag.task_id, tag.tag_key, tag.tag_value
    FROM unnest(CAST(:tag_task_ids AS TEXT[]), CAST(:tag_keys AS TEXT[]),
                CAST(:tag_values AS TEXT[])) AS tag (task_id, tag_key, tag_value)
    JOIN task ON task.task_id = tag.task_id
)
SELECT task_id FROM task

-- name: get_many
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks WHERE task_id = ANY(CAST(:task_ids AS TEXT[]))

-- name: states
SELECT task_id, state FROM tasks WHERE task_id = ANY(CAST(:task_ids AS TEXT[]))

-- name: runs_of
SELECT task_id, runs FROM tasks WHERE task_id = ANY(CAST(:task_ids AS TEXT[]))

-- name: compare_and_set
-- notify_dependents is kept only for a task that has dependents, so resolving one without
-- any costs no dependency pass; a dependent created later checks the states itself. The
-- definition is written only when a transition changed it (a new priority), else NULL.
UPDATE tasks
SET definition = coalesce(:definition, definition), retries_left = :retries_left, runs = :runs, state = :state, taken_until = :taken_until,
    open_deadline = :open_deadline, hint_due = :hint_due, visible_at = :visible_at,
    pending_priority = CAST(:pending_priority AS SMALLINT),
    resolved = :resolved, notify_dependents = :notify_dependents AND EXISTS (
        SELECT 1 FROM task_dependencies WHERE required_task_id = :task_id
    ),
    version = version + 1
WHERE task_id = :task_id AND version = :version
RETURNING version, notify_dependents, task_id

-- name: compare_and_set_many
-- compare_and_set for a batch of distinct tasks in one statement: each row is written only if
-- its stored version still matches; the rows returned are the ones written. ``rows`` holds
-- each task's status columns as one JSON object, not one array per column: asyncpg checks
-- every element of an array parameter against collections.abc's classes as it encodes it
-- (one element a task, not thirteen). Not json_to_recordset over one JSON array: a generic
-- plan expects 100 rows of it, and joined the tasks by a sequential scan of the table.
UPDATE tasks AS t
SET definition = coalesce(n.definition, t.definition), retries_left = n.retries_left,
    runs = n.runs, state = n.state, taken_until = n.taken_until,
    open_deadline = n.open_deadline, hint_due = n.hint_due, visible_at = n.visible_at,
    pending_priority = n.pending_priority, resolved = n.resolved, notify_dependents = n.notify_dependents AND EXISTS (
        SELECT 1 FROM task_dependencies WHERE required_task_id = t.task_id
    ),
    version = t.version + 1
FROM unnest(CAST(:rows AS JSON[])) AS r (status_row),
     json_to_record(r.status_row)
    AS n (task_id TEXT, version INTEGER, definition TEXT, retries_left INTEGER, runs TEXT,
          state TEXT, taken_until BIGINT, open_deadline BIGINT, hint_due BIGINT,
          visible_at BIGINT, pending_priority SMALLINT, resolved BIGINT,
          notify_dependents BOOLEAN)
WHERE t.task_id = n.task_id AND t.version = n.version
RETURNING t.version, t.notify_dependents, t.task_id

-- name: confirm_hint
-- hint_due is set only while the last run is pending, so the JSON is parsed for at most one
-- row that still needs it.
UPDATE tasks SET hint_due = NULL
WHERE task_id = :task_id AND hint_due IS NOT NULL
  AND CAST(CAST(runs AS JSON) -> -1 ->> 'run_id' AS INTEGER) = :run_id

-- name: tasks_to_notify
-- The order matches the partial index, so the planner always walks it; without one it may
-- pick a sequential scan, expecting many rows where notify_dependents is set.
SELECT task_id FROM tasks WHERE notify_dependents ORDER BY task_id LIMIT :limit

-- name: delete_tasks
-- Every deletion of tasks (expiry, deleteTasks, the resolved-task TTLs) is this statement,
-- its first CTE the statement that selects and locks the batch (expired_tasks,
-- matching_tasks; coordinator.store.postgres composes them). Edges go both ways: as the dependent and as the required task; tags and
-- artifacts go by cascade. Returns how many tasks were deleted.
WITH doomed AS (
    {doomed}
), deleted AS (
    DELETE FROM tasks USING doomed WHERE tasks.task_id = doomed.task_id
    RETURNING tasks.task_id
), edges_as_dependent AS (
    DELETE FROM task_dependencies USING deleted
    WHERE task_dependencies.dependent_task_id = deleted.task_id
), edges_as_required AS (
    DELETE FROM task_dependencies USING deleted
    WHERE task_dependencies.required_task_id = deleted.task_id
)
SELECT count(*) FROM deleted

-- name: expired_tasks
-- delete_tasks' batch for the expiry sweep. Sweepers in several replicas take disjoint batches
-- (SKIP LOCKED) instead of queueing on each other's rows; a task row locked by a concurrent
-- compare-and-set is simply left for the next pass.
SELECT task_id FROM tasks WHERE expires <= :now
ORDER BY expires LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: run_counts
SELECT
    count(*) FILTER (WHERE state = 'pending' AND coalesce(visible_at, 0) <= :now) AS pending,
    count(*) FILTER (WHERE state = 'pending' AND visible_at > :now) AS delayed,
    count(*) FILTER (WHERE state = 'running') AS running
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND state IN ('pending', 'running')

-- name: record_sightings
-- One statement, one transaction: the task queues and the workers seen, each side a JSON
-- array of rows. A worker's recent tasks become its stored ones followed by the sighting's,
-- of which the last `keep` are kept.
WITH queues AS (
    INSERT INTO task_queues (provisioner_id, worker_type, expires, last_date_active)
    SELECT provisioner_id, worker_type, expires, seen
    FROM json_to_recordset(CAST(:queues AS JSON))
         AS s (provisioner_id TEXT, worker_type TEXT, seen BIGINT, expires BIGINT)
    ON CONFLICT (provisioner_id, worker_type) DO UPDATE
    SET expires = greatest(task_queues.expires, EXCLUDED.expires),
        last_date_active = greatest(task_queues.last_date_active, EXCLUDED.last_date_active)
)
INSERT INTO workers AS w (provisioner_id, worker_type, worker_group, worker_id, first_claim,
                          last_date_active, expires, quarantine_until, quarantine_details,
                          recent_tasks)
SELECT provisioner_id, worker_type, worker_group, worker_id, seen, seen, expires,
       quarantine_until, '[]', recent_tasks
FROM json_to_recordset(CAST(:workers AS JSON))
     AS s (provisioner_id TEXT, worker_type TEXT, worker_group TEXT, worker_id TEXT,
           seen BIGINT, expires BIGINT, quarantine_until BIGINT, recent_tasks TEXT)
ON CONFLICT (provisioner_id, worker_type, worker_group, worker_id) DO UPDATE
SET last_date_active = greatest(w.last_date_active, EXCLUDED.last_date_active),
    expires = greatest(w.expires, EXCLUDED.expires),
    recent_tasks = (
        SELECT CAST(coalesce(jsonb_agg(kept.task ORDER BY kept.ord), '[]') AS TEXT)
        FROM (
            SELECT task, ord
            FROM jsonb_array_elements(
                     CAST(w.recent_tasks AS JSONB) || CAST(EXCLUDED.recent_tasks AS JSONB)
                 ) WITH ORDINALITY AS every_task (task, ord)
            ORDER BY ord DESC LIMIT :keep
        ) AS kept
    )

-- name: workers
-- Listed: unexpired or quarantined. A NULL `quarantined` lists both kinds.
SELECT provisioner_id, worker_type, worker_group, worker_id, first_claim, last_date_active,
       expires, quarantine_until, quarantine_details, recent_tasks
FROM workers
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND (worker_group, worker_id) > (:after_worker_group, :after_worker_id)
  AND (expires > :now OR quarantine_until > :now)
  AND (CAST(:quarantined AS BOOLEAN) IS NULL
       OR CAST(:quarantined AS BOOLEAN) = (quarantine_until > :now))
ORDER BY worker_group, worker_id LIMIT :limit

-- name: quarantine_worker
UPDATE workers
SET quarantine_until = :quarantine_until, expires = greatest(expires, :expires),
    quarantine_details = CAST(
        CAST(quarantine_details AS JSONB) || jsonb_build_array(CAST(:note AS JSONB)) AS TEXT
    )
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
           CAST(CAST(runs AS JSON) -> -1 ->> 'started' AS BIGINT) AS started
    FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type AND state = 'running'
) AS running
WHERE (started, task_id) > (:after_started, :after_task_id)
ORDER BY started, task_id LIMIT :limit

-- name: run_counts_of
SELECT q.provisioner_id, q.worker_type,
    count(*) FILTER (WHERE t.state = 'pending' AND coalesce(t.visible_at, 0) <= :now) AS pending,
    count(*) FILTER (WHERE t.state = 'pending' AND t.visible_at > :now) AS delayed,
    count(*) FILTER (WHERE t.state = 'running') AS running
FROM unnest(CAST(:provisioner_ids AS TEXT[]), CAST(:worker_types AS TEXT[]))
     AS q (provisioner_id, worker_type)
JOIN tasks t ON t.provisioner_id = q.provisioner_id AND t.worker_type = q.worker_type
WHERE t.state IN ('pending', 'running')
GROUP BY q.provisioner_id, q.worker_type

-- name: resolved_counts_of
-- Read from tasks_by_resolved (`resolved >= :since` implies its `resolved IS NOT NULL`): one
-- entry per task resolved since :since, whatever the queues kept from before.
SELECT q.provisioner_id, q.worker_type,
    count(*) FILTER (WHERE t.state = 'completed') AS completed,
    count(*) FILTER (WHERE t.state = 'failed') AS failed,
    count(*) FILTER (WHERE t.state = 'exception') AS exception
FROM unnest(CAST(:provisioner_ids AS TEXT[]), CAST(:worker_types AS TEXT[]))
     AS q (provisioner_id, worker_type)
JOIN tasks t ON t.provisioner_id = q.provisioner_id AND t.worker_type = q.worker_type
WHERE t.resolved >= :since
GROUP BY q.provisioner_id, q.worker_type

-- name: matching_tasks
-- delete_tasks' batch for deleteTasks and the outcome-TTL sweep, one bounded batch per
-- statement. FOR UPDATE without SKIP LOCKED: a row held by a compare-and-set is waited for
-- (milliseconds), not skipped, so a batch smaller than the limit means nothing matches any
-- more. The compare-and-set then finds no row and its caller answers 404.
SELECT task_id FROM tasks WHERE {filters}
ORDER BY task_id LIMIT :limit
FOR UPDATE

-- name: shared_secret
-- The first replica to ask makes the secret; every later ask, from any replica, reads it.
-- No row when a concurrent first ask committed while this one waited on its insert: the
-- SELECT's snapshot predates that row, so the caller asks again.
WITH made AS (
    INSERT INTO shared_secrets (name, secret) VALUES (:secret_name, :secret)
    ON CONFLICT (name) DO NOTHING
    RETURNING secret
)
SELECT secret FROM made
UNION ALL
SELECT secret FROM shared_secrets WHERE name = :secret_name
LIMIT 1

-- name: artifacts_of_tasks
SELECT task_id, run_id, name, storage_type, content_type, content_length, expires, details,
       created
FROM artifacts WHERE task_id = ANY(CAST(:task_ids AS TEXT[]))
ORDER BY task_id, run_id, name

-- name: delete_artifacts
DELETE FROM artifacts AS a
USING unnest(CAST(:task_ids AS TEXT[]), CAST(:run_ids AS INTEGER[]), CAST(:names AS TEXT[]))
      AS doomed (task_id, run_id, name)
WHERE a.task_id = doomed.task_id AND a.run_id = doomed.run_id AND a.name = doomed.name
RETURNING a.name

-- name: lock_outbox
-- One publisher at a time across replicas (docs/events.md): the others skip and try later.
SELECT id FROM queue_event_outbox_lock WHERE id = 1 FOR UPDATE SKIP LOCKED

-- name: delete_outbox_events
DELETE FROM queue_event_outbox WHERE id = ANY(CAST(:ids AS BIGINT[]))

-- name: claimable_runs
-- Store dispatch's claim: the queue's pending runs visible now, from the partial index
-- tasks_claimable (pending rows only), up to :limit in all: level by level in :levels' order
-- (highest first, or the levels a weighted claim drew), the earliest visible :quotas[i] of
-- level :levels[i]. Each level is read from its floor (coordinator.store.claim_floors: 0 reads
-- it all) by an index seek, not a walk past the dead entries earlier claims left. A nested
-- loop over unnest keeps its outer order, and the outer LIMIT stops it at the first :limit
-- runs, so no level after is read or locked once the ones before fill the claim. The rows
-- stay locked until the caller's compare-and-set commits; concurrent claimers (other
-- requests, other replicas) skip them and take the next ones instead of queueing behind.
SELECT t.task_id, t.definition, t.retries_left, t.runs, t.hint_due, t.notify_dependents,
       t.version, t.traceparent, l.level, t.visible_at
FROM unnest(CAST(:levels AS INT[]), CAST(:quotas AS INT[]), CAST(:floors AS BIGINT[]))
     AS l (level, quota, floor)
CROSS JOIN LATERAL (
    SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
           traceparent, visible_at
    FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
      AND pending_priority = l.level AND visible_at >= l.floor AND visible_at <= :now
      AND open_deadline > :now
    ORDER BY visible_at LIMIT l.quota
    FOR UPDATE SKIP LOCKED
) AS t
LIMIT :limit

-- name: claimable_levels
-- Store dispatch's weighted claim, first step: how many runs (up to :limit) each priority
-- level has claimable now, from the partial index tasks_claimable, each level from its floor,
-- without locking any: the caller draws from these how many of each level to claim.
SELECT l.level, (
    SELECT count(*) FROM (
        SELECT 1 FROM tasks
        WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
          AND pending_priority = l.level AND visible_at >= l.floor AND visible_at <= :now
          AND open_deadline > :now
        LIMIT :limit
    ) AS claimable
) AS runs
FROM unnest(CAST(:levels AS INT[]), CAST(:floors AS BIGINT[])) AS l (level, floor)

-- name: claimable_by_key
-- A keyed claim (maxRunningPerKey), first step: the candidates, without locking any. The
-- recursive part walks the (level, key) pairs that have pending runs, one index seek each
-- (tasks_claimable_by_key), however long each key's backlog; each pair not in :full (the
-- keys at their limit) gives its :per_key earliest visible claimable runs. The runs without a
-- key give their :limit earliest of each level, from tasks_claimable past the keyed ones.
WITH RECURSIVE pair (level, key) AS (
    (SELECT pending_priority, concurrency_key FROM tasks
     WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
       AND pending_priority IS NOT NULL AND concurrency_key IS NOT NULL
     ORDER BY pending_priority DESC, concurrency_key DESC LIMIT 1)
    UNION ALL
    SELECT next.pending_priority, next.concurrency_key
    FROM pair CROSS JOIN LATERAL (
        SELECT pending_priority, concurrency_key FROM tasks
        WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
          AND pending_priority IS NOT NULL AND concurrency_key IS NOT NULL
          AND (pending_priority, concurrency_key) < (pair.level, pair.key)
        ORDER BY pending_priority DESC, concurrency_key DESC LIMIT 1
    ) AS next
)
SELECT run.task_id, pair.level, pair.key
FROM pair CROSS JOIN LATERAL (
    SELECT task_id, visible_at FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
      AND pending_priority = pair.level AND concurrency_key = pair.key
      AND visible_at <= :now AND open_deadline > :now
    ORDER BY visible_at LIMIT :per_key
) AS run
WHERE pair.key <> ALL(CAST(:full AS TEXT[]))
UNION ALL
SELECT run.task_id, level, NULL
FROM unnest(CAST(:levels AS INT[])) AS level CROSS JOIN LATERAL (
    SELECT task_id FROM tasks
    WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
      AND pending_priority = level AND concurrency_key IS NULL
      AND visible_at <= :now AND open_deadline > :now
    ORDER BY visible_at LIMIT :limit
) AS run

-- name: claimable_runs_chosen
-- A keyed claim, second step: the runs chosen, locked as claimable_runs locks them, still
-- claimable.
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks
WHERE task_id = ANY(CAST(:task_ids AS TEXT[]))
  AND pending_priority IS NOT NULL AND visible_at <= :now AND open_deadline > :now
FOR UPDATE SKIP LOCKED

-- name: notify_pending
-- Store dispatch's wake-up across replicas: one notification per task queue that has a run
-- just made pending (the payload: provisionerId/workerType visibleAt), delivered to every
-- coordinator listening on the channel when this statement's transaction commits.
SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS TEXT[])) AS payload

-- name: mark_clients_used
-- used is a JSON object, clientId to time: each raises its client's last_date_used. The rows
-- are locked in clientId order first, so replicas marking the same clients never deadlock.
WITH used AS (
    SELECT key AS client_id, CAST(value AS BIGINT) AS used
    FROM json_each_text(CAST(:used AS JSON))
), locked AS MATERIALIZED (
    SELECT c.client_id, u.used
    FROM auth_clients AS c JOIN used AS u ON u.client_id = c.client_id
    WHERE c.last_date_used < u.used
    ORDER BY c.client_id
    FOR UPDATE OF c
)
UPDATE auth_clients AS c SET last_date_used = locked.used
FROM locked
WHERE c.client_id = locked.client_id AND c.last_date_used < locked.used

-- name: delete_roles_except
-- role_ids is a JSON array of roleIds: every other role goes.
DELETE FROM auth_roles
WHERE NOT EXISTS (
    SELECT 1 FROM json_array_elements_text(CAST(:role_ids AS JSON)) AS kept (role_id)
    WHERE kept.role_id = auth_roles.role_id
)

-- name: get_indexed_tasks
-- findTask's and findTasksAtIndex's entries: :paths is a JSON array of [namespace, name].
SELECT t.namespace, t.name, t.rank, t.task_id, t.data, t.expires
FROM jsonb_array_elements(CAST(:paths AS JSONB)) AS p (path)
JOIN indexed_tasks AS t ON t.namespace = p.path ->> 0 AND t.name = p.path ->> 1

-- name: lock_pending_inbox_rows
-- The ingester's rows, held until its transaction ends; another ingester skips them.
SELECT id, task_id, client_id, definition,
       CAST(EXTRACT(EPOCH FROM created) * 1000 AS BIGINT) AS created, reason
FROM task_inbox
WHERE state = 'pending'
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: delete_inbox_rows
DELETE FROM task_inbox WHERE id = ANY(CAST(:ids AS BIGINT[]))

-- name: reject_inbox_rows
UPDATE task_inbox AS t SET state = 'rejected', reason = r.reason
FROM unnest(CAST(:ids AS BIGINT[]), CAST(:reasons AS TEXT[])) AS r (id, reason)
WHERE t.id = r.id

-- name: rejected_inbox_rows
SELECT id, task_id, client_id, definition,
       CAST(EXTRACT(EPOCH FROM created) * 1000 AS BIGINT) AS created, reason
FROM task_inbox
WHERE state = 'rejected' AND id > :after
ORDER BY id
LIMIT :limit

-- name: delete_rejected_inbox_row
DELETE FROM task_inbox WHERE id = :id AND state = 'rejected' RETURNING id

-- name: count_rejected_inbox_rows
SELECT count(*) FROM task_inbox WHERE state = 'rejected'
