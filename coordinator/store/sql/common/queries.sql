-- The statements both drivers run as they are: the same text in SQLite's and PostgreSQL's
-- dialects. coordinator.store.sqlfiles adds them to each driver's own queries.sql (a name may
-- be in only one of the two). Parameters are written :name; the PostgreSQL driver rewrites
-- them to asyncpg's $1, $2, ... Keep :word out of string literals and comments.

-- name: get_task
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks WHERE task_id = :task_id

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

-- name: task_group
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks
WHERE task_group_id = :task_group_id AND task_id > :after
ORDER BY task_id LIMIT :limit

-- name: dependents
SELECT t.task_id, t.definition, t.retries_left, t.runs, t.hint_due, t.notify_dependents, t.version,
       t.traceparent
FROM task_dependencies d JOIN tasks t ON t.task_id = d.dependent_task_id
WHERE d.required_task_id = :task_id AND d.dependent_task_id > :after
ORDER BY d.dependent_task_id LIMIT :limit

-- name: pending_by_task_queue
-- The reconciler's pass: pending runs per task queue, from the index on queue and state.
SELECT provisioner_id, worker_type, count(*) AS pending
FROM tasks WHERE state = 'pending'
GROUP BY provisioner_id, worker_type

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

-- name: task_queue
SELECT provisioner_id, worker_type, expires, last_date_active, description, stability
FROM task_queues
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type AND expires > :now

-- name: task_queues
SELECT provisioner_id, worker_type, expires, last_date_active, description, stability
FROM task_queues
WHERE (provisioner_id, worker_type) > (:after_provisioner_id, :after_worker_type)
  AND expires > :now
ORDER BY provisioner_id, worker_type LIMIT :limit

-- name: worker_types
SELECT provisioner_id, worker_type, expires, last_date_active, description, stability
FROM task_queues
WHERE provisioner_id = :provisioner_id
  AND (provisioner_id, worker_type) > (:after_provisioner_id, :after_worker_type)
  AND expires > :now
ORDER BY provisioner_id, worker_type LIMIT :limit

-- name: provisioner
SELECT provisioner_id, max(expires) AS expires, max(last_date_active) AS last_date_active
FROM task_queues
WHERE provisioner_id = :provisioner_id AND expires > :now
GROUP BY provisioner_id

-- name: provisioners
SELECT provisioner_id, max(expires) AS expires, max(last_date_active) AS last_date_active
FROM task_queues
WHERE provisioner_id > :after_provisioner_id AND expires > :now
GROUP BY provisioner_id ORDER BY provisioner_id LIMIT :limit

-- name: worker
SELECT provisioner_id, worker_type, worker_group, worker_id, first_claim, last_date_active,
       expires, quarantine_until, quarantine_details, recent_tasks
FROM workers
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND worker_group = :worker_group AND worker_id = :worker_id

-- name: quarantined_workers
SELECT provisioner_id, worker_type, worker_group, worker_id, quarantine_until
FROM workers WHERE quarantine_until > :now

-- name: pending_runs
-- visible_at is set exactly while the last run is pending. SQLite walks tasks_by_queue_state,
-- which holds a queue's pending rows in visible_at order (ties sort by task_id within a
-- page). PostgreSQL sorts each page from the queue's pending rows (a top-N sort: one page in
-- memory): an index in this order would cost every create and claim one more index write,
-- measured as a few percent of the claim path, for a monitoring read.
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type AND state = 'pending'
  AND (visible_at, task_id) > (:after_visible_at, :after_task_id)
ORDER BY visible_at, task_id LIMIT :limit

-- name: delete_expired_workers
-- A quarantined worker stays until its quarantine ends, expired or not (as in Taskcluster).
DELETE FROM workers
WHERE (provisioner_id, worker_type, worker_group, worker_id) IN (
    SELECT provisioner_id, worker_type, worker_group, worker_id FROM workers
    WHERE expires <= :now AND quarantine_until <= :now
    ORDER BY expires LIMIT :limit
)
RETURNING worker_id

-- name: delete_expired_task_queues
DELETE FROM task_queues
WHERE (provisioner_id, worker_type) IN (
    SELECT provisioner_id, worker_type FROM task_queues
    WHERE expires <= :now ORDER BY expires LIMIT :limit
)
RETURNING worker_type

-- name: list_tasks
-- The management API: {filters} is the WHERE clause of a TaskFilter, written with its own
-- parameters by coordinator/store/task_filters.py.
SELECT task_id, definition, retries_left, runs, hint_due, notify_dependents, version,
       traceparent
FROM tasks
WHERE task_id > :after AND {filters}
ORDER BY task_id LIMIT :limit

-- name: matching_task_ids
SELECT task_id FROM tasks
WHERE task_id > :after AND {filters}
ORDER BY task_id LIMIT :limit

-- name: count_tasks
-- One row per filter state that matches (delayed: pending, not claimable yet).
SELECT CASE WHEN state = 'pending' AND visible_at > :now THEN 'delayed' ELSE state END
       AS filter_state,
       count(*) AS tasks
FROM tasks WHERE {filters}
GROUP BY 1

-- name: insert_artifact
-- createArtifact, only while the task exists: no row back means the run has the name already
-- (or the task is gone). Casts, because PostgreSQL reads a bare parameter in a select list as
-- text.
INSERT INTO artifacts (task_id, run_id, name, storage_type, content_type, content_length,
                       expires, details, created)
SELECT :task_id, CAST(:run_id AS INTEGER), :artifact_name, :storage_type,
       :content_type, CAST(:content_length AS BIGINT), CAST(:expires AS BIGINT), :details,
       CAST(:created AS BIGINT)
WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = :task_id)
ON CONFLICT (task_id, run_id, name) DO NOTHING
RETURNING name

-- name: insert_inline_artifact
-- A report's artifact, in the transaction that resolves its run (the task exists: it was just
-- written). A name the run has already keeps its artifact.
INSERT INTO artifacts (task_id, run_id, name, storage_type, content_type, content_length,
                       expires, details, created, content)
VALUES (:task_id, :run_id, :artifact_name, :storage_type, :content_type, :content_length,
        :expires, :details, :created, :content)
ON CONFLICT (task_id, run_id, name) DO NOTHING

-- name: artifact_content
SELECT content FROM artifacts
WHERE task_id = :task_id AND run_id = :run_id AND name = :artifact_name

-- name: get_artifact
SELECT task_id, run_id, name, storage_type, content_type, content_length, expires, details,
       created
FROM artifacts WHERE task_id = :task_id AND run_id = :run_id AND name = :artifact_name

-- name: replace_artifact
-- A repeated createArtifact: contentType, created and the declared length stay. An s3
-- artifact (which stays s3) keeps its details, the upload state only mark_uploaded writes,
-- so a repeat racing an upload cannot undo it.
UPDATE artifacts
SET storage_type = :storage_type, expires = :expires,
    details = CASE WHEN storage_type = 's3' AND :storage_type = 's3' THEN details
                   ELSE :details END
WHERE task_id = :task_id AND run_id = :run_id AND name = :artifact_name

-- name: mark_uploaded
-- Compare-and-set on the storage type: only an s3 artifact records an upload, whose bytes are
-- then the blob store's (an inline artifact's content goes).
UPDATE artifacts SET details = :details, content = NULL
WHERE task_id = :task_id AND run_id = :run_id AND name = :artifact_name
  AND storage_type = 's3'
RETURNING name

-- name: list_artifacts
-- Every row, expired or not (Taskcluster lists them until they are deleted), in name order.
SELECT task_id, run_id, name, storage_type, content_type, content_length, expires, details,
       created
FROM artifacts
WHERE task_id = :task_id AND run_id = :run_id AND name > :after
ORDER BY name LIMIT :limit

-- name: expired_artifacts
-- At or before now, as tasks expire: an artifact never expires after its task, so the
-- artifact sweeper reaches a task's artifacts no later than the expiry sweeper the task.
SELECT task_id, run_id, name, storage_type, content_type, content_length, expires, details,
       created
FROM artifacts WHERE expires <= :now ORDER BY expires LIMIT :limit

-- name: insert_outbox_event
INSERT INTO queue_event_outbox (event_key, exchange, routing_key, cc, body)
VALUES (:event_key, :exchange, :routing_key, :cc, :body)

-- name: outbox_events
-- The oldest messages due, except those of a key (a task) that has a message waiting out a
-- refusal's backoff: they wait behind it, so the key's order holds.
SELECT id, event_key, exchange, routing_key, cc, body, attempts
FROM queue_event_outbox
WHERE retry_at <= :now AND event_key NOT IN (
    SELECT event_key FROM queue_event_outbox WHERE retry_at > 0 AND retry_at > :now
)
ORDER BY id LIMIT :limit

-- name: retry_outbox_event
UPDATE queue_event_outbox SET attempts = attempts + 1, retry_at = :retry_at WHERE id = :id

-- name: park_outbox_event
-- Copied before the delete of the pass removes it from the outbox.
INSERT INTO queue_event_outbox_parked
    (id, event_key, exchange, routing_key, cc, body, attempts, reason, parked)
SELECT id, event_key, exchange, routing_key, cc, body, attempts + 1, :reason, :now
FROM queue_event_outbox WHERE id = :id

-- name: outbox_depth
SELECT count(*) FROM queue_event_outbox

-- name: insert_hook
-- createHook: no row back means the hook exists.
INSERT INTO hooks (hook_group_id, hook_id, metadata, task, schedule, trigger_schema, bindings,
                   scopes, trigger_token, next_due, version)
VALUES (:hook_group_id, :hook_id, :metadata, :task, :schedule, :trigger_schema, :bindings,
        :scopes, :trigger_token, :next_due, 1)
ON CONFLICT (hook_group_id, hook_id) DO NOTHING
RETURNING hook_id

-- name: get_hook
SELECT hook_group_id, hook_id, metadata, task, schedule, trigger_schema, bindings, scopes,
       trigger_token, next_due, version
FROM hooks WHERE hook_group_id = :hook_group_id AND hook_id = :hook_id

-- name: hooks_in_group
SELECT hook_group_id, hook_id, metadata, task, schedule, trigger_schema, bindings, scopes,
       trigger_token, next_due, version
FROM hooks WHERE hook_group_id = :hook_group_id ORDER BY hook_id

-- name: hook_groups
SELECT DISTINCT hook_group_id FROM hooks ORDER BY hook_group_id

-- name: compare_and_set_hook
-- Every column but the key, only while the stored version is still the one read.
UPDATE hooks
SET metadata = :metadata, task = :task, schedule = :schedule, trigger_schema = :trigger_schema,
    bindings = :bindings, scopes = :scopes, trigger_token = :trigger_token,
    next_due = :next_due, version = version + 1
WHERE hook_group_id = :hook_group_id AND hook_id = :hook_id AND version = :version
RETURNING version

-- name: delete_hook
DELETE FROM hooks WHERE hook_group_id = :hook_group_id AND hook_id = :hook_id
RETURNING hook_id

-- name: delete_last_fires
DELETE FROM hook_last_fires WHERE hook_group_id = :hook_group_id AND hook_id = :hook_id

-- name: due_hooks
-- The scheduler's scan: hooks whose next due time has come, the most overdue first.
SELECT hook_group_id, hook_id, metadata, task, schedule, trigger_schema, bindings, scopes,
       trigger_token, next_due, version
FROM hooks WHERE next_due IS NOT NULL AND next_due <= :now ORDER BY next_due LIMIT :limit

-- name: insert_last_fire
-- One row per taskId: a scheduled fire repeated (another replica, a crash) adds nothing.
INSERT INTO hook_last_fires (hook_group_id, hook_id, task_id, fired_by, task_create_time,
                             result, error)
VALUES (:hook_group_id, :hook_id, :task_id, :fired_by, :task_create_time, :result, :error)
ON CONFLICT (hook_group_id, hook_id, task_id) DO NOTHING
RETURNING task_id

-- name: last_fires
-- The newest first, from before the (task_create_time, task_id) of the previous page's last.
SELECT hook_group_id, hook_id, task_id, fired_by, task_create_time, result, error
FROM hook_last_fires
WHERE hook_group_id = :hook_group_id AND hook_id = :hook_id
  AND (task_create_time < :before_time
       OR (task_create_time = :before_time AND task_id < :before_task_id))
ORDER BY task_create_time DESC, task_id DESC LIMIT :limit

-- name: expire_last_fires
-- The oldest fires created before :before, up to :limit of them.
DELETE FROM hook_last_fires
WHERE (hook_group_id, hook_id, task_id) IN (
    SELECT hook_group_id, hook_id, task_id FROM hook_last_fires
    WHERE task_create_time < :before ORDER BY task_create_time LIMIT :limit)
RETURNING task_id

-- name: upsert_indexed_task
-- The rank rule (coordinator.domain.index.outranks): the entry replaces the one at its path
-- if its rank is at least that one's, or that one has expired; no row back: it was outranked.
INSERT INTO indexed_tasks (namespace, name, rank, task_id, data, expires)
VALUES (:namespace, :name, :rank, :task_id, :data, :expires)
ON CONFLICT (namespace, name) DO UPDATE
SET rank = excluded.rank, task_id = excluded.task_id, data = excluded.data,
    expires = excluded.expires
WHERE indexed_tasks.rank <= excluded.rank OR indexed_tasks.expires <= :now
RETURNING name

-- name: upsert_index_namespace
-- A namespace above an entry just stored: created, or its expiry raised (never lowered). Only
-- tried when the read finds it missing or expiring sooner: the namespaces near the top are
-- above every entry, and an upsert would lock their row until commit even when it changes
-- nothing, one completing transaction after another.
INSERT INTO index_namespaces (parent, name, expires)
SELECT CAST(:parent AS TEXT), CAST(:name AS TEXT), CAST(:expires AS BIGINT)
WHERE NOT EXISTS (
    SELECT 1 FROM index_namespaces
    WHERE parent = :parent AND name = :name AND expires >= :expires)
ON CONFLICT (parent, name) DO UPDATE SET expires = excluded.expires
WHERE index_namespaces.expires < excluded.expires

-- name: get_indexed_task
-- findTask's entry: one primary-key read (get_indexed_tasks serves several paths at once).
SELECT namespace, name, rank, task_id, data, expires FROM indexed_tasks
WHERE namespace = :namespace AND name = :entry_name

-- name: list_indexed_tasks
-- listTasks' page: the unexpired entries of one namespace after the previous page's last name.
SELECT namespace, name, rank, task_id, data, expires FROM indexed_tasks
WHERE namespace = :namespace AND name > :after AND expires > :now
ORDER BY name LIMIT :limit

-- name: list_index_namespaces
-- listNamespaces' page: the unexpired namespaces under one parent after the previous page's.
SELECT parent, name, expires FROM index_namespaces
WHERE parent = :parent AND name > :after AND expires > :now
ORDER BY name LIMIT :limit

-- name: delete_indexed_task
DELETE FROM indexed_tasks WHERE namespace = :namespace AND name = :entry_name RETURNING name

-- name: expire_indexed_tasks
-- The expiry sweep: up to :limit entries that expired before :now, the earliest first.
DELETE FROM indexed_tasks
WHERE (namespace, name) IN (
    SELECT namespace, name FROM indexed_tasks WHERE expires < :now ORDER BY expires LIMIT :limit)
RETURNING name

-- name: expire_index_namespaces
DELETE FROM index_namespaces
WHERE (parent, name) IN (
    SELECT parent, name FROM index_namespaces WHERE expires < :now ORDER BY expires LIMIT :limit)
RETURNING name

-- name: queue_controls
-- The task queues an operator paused, limited or gave defaults (the per-second reload of
-- every replica).
SELECT provisioner_id, worker_type, paused_since, paused_reason, max_running,
       max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
       max_running_per_key
FROM task_queue_controls
WHERE paused_since IS NOT NULL OR max_running IS NOT NULL OR max_claims_per_second IS NOT NULL
   OR claim_timeout_s IS NOT NULL OR completed_ttl_s IS NOT NULL OR failed_ttl_s IS NOT NULL
   OR max_running_per_key IS NOT NULL

-- name: queue_controls_of
SELECT provisioner_id, worker_type, paused_since, paused_reason, max_running,
       max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
       max_running_per_key
FROM task_queue_controls
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type

-- name: pause_task_queue
-- A queue paused again keeps the time it was first paused, with the latest reason.
INSERT INTO task_queue_controls (provisioner_id, worker_type, paused_since, paused_reason)
VALUES (:provisioner_id, :worker_type, :paused_since, :paused_reason)
ON CONFLICT (provisioner_id, worker_type) DO UPDATE
SET paused_since = coalesce(task_queue_controls.paused_since, excluded.paused_since),
    paused_reason = excluded.paused_reason
RETURNING provisioner_id, worker_type, paused_since, paused_reason, max_running,
          max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
          max_running_per_key

-- name: resume_task_queue
UPDATE task_queue_controls SET paused_since = NULL, paused_reason = NULL
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
RETURNING provisioner_id, worker_type, paused_since, paused_reason, max_running,
          max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
          max_running_per_key

-- name: limit_task_queue
-- Only the limits the request names change (set_*); the others keep their value.
INSERT INTO task_queue_controls (provisioner_id, worker_type, max_running, max_claims_per_second,
                                 max_running_per_key)
VALUES (:provisioner_id, :worker_type, :max_running, :max_claims_per_second,
        :max_running_per_key)
ON CONFLICT (provisioner_id, worker_type) DO UPDATE
SET max_running = CASE WHEN :set_max_running THEN excluded.max_running
                       ELSE task_queue_controls.max_running END,
    max_claims_per_second = CASE WHEN :set_max_claims_per_second
                                 THEN excluded.max_claims_per_second
                                 ELSE task_queue_controls.max_claims_per_second END,
    max_running_per_key = CASE WHEN :set_max_running_per_key THEN excluded.max_running_per_key
                               ELSE task_queue_controls.max_running_per_key END
RETURNING provisioner_id, worker_type, paused_since, paused_reason, max_running,
          max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
          max_running_per_key

-- name: default_task_queue
-- Only the defaults the request names change (set_*); the others keep their value.
INSERT INTO task_queue_controls (provisioner_id, worker_type, claim_timeout_s, completed_ttl_s,
                                 failed_ttl_s)
VALUES (:provisioner_id, :worker_type, :claim_timeout_s, :completed_ttl_s, :failed_ttl_s)
ON CONFLICT (provisioner_id, worker_type) DO UPDATE
SET claim_timeout_s = CASE WHEN :set_claim_timeout THEN excluded.claim_timeout_s
                           ELSE task_queue_controls.claim_timeout_s END,
    completed_ttl_s = CASE WHEN :set_completed_ttl THEN excluded.completed_ttl_s
                           ELSE task_queue_controls.completed_ttl_s END,
    failed_ttl_s = CASE WHEN :set_failed_ttl THEN excluded.failed_ttl_s
                        ELSE task_queue_controls.failed_ttl_s END
RETURNING provisioner_id, worker_type, paused_since, paused_reason, max_running,
          max_claims_per_second, claims_tat_us, claim_timeout_s, completed_ttl_s, failed_ttl_s,
          max_running_per_key

-- name: set_claims_tat
UPDATE task_queue_controls SET claims_tat_us = :claims_tat_us
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type

-- name: give_back_claims
UPDATE task_queue_controls SET claims_tat_us = claims_tat_us - :room_us
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type

-- name: insert_client
-- createClient: no row back means the client exists.
INSERT INTO auth_clients (client_id, description, encrypted_access_token, scopes, expires,
                          delete_on_expiration, disabled, created, last_modified,
                          last_date_used, last_rotated, version)
VALUES (:client_id, :description, :encrypted_access_token, :scopes, :expires,
        :delete_on_expiration, :disabled, :created, :last_modified, :last_date_used,
        :last_rotated, 1)
ON CONFLICT (client_id) DO NOTHING
RETURNING client_id

-- name: get_client
SELECT client_id, description, encrypted_access_token, scopes, expires, delete_on_expiration,
       disabled, created, last_modified, last_date_used, last_rotated, version
FROM auth_clients WHERE client_id = :client_id

-- name: all_clients
SELECT client_id, description, encrypted_access_token, scopes, expires, delete_on_expiration,
       disabled, created, last_modified, last_date_used, last_rotated, version
FROM auth_clients ORDER BY client_id

-- name: list_clients
-- listClients' page: after the previous page's last clientId, from low on (the prefix, or
-- the empty string): a prefix whose clientIds have no bound above (list_clients_below).
SELECT client_id, description, encrypted_access_token, scopes, expires, delete_on_expiration,
       disabled, created, last_modified, last_date_used, last_rotated, version
FROM auth_clients
WHERE client_id > :after AND client_id >= :low
ORDER BY client_id LIMIT :limit

-- name: list_clients_below
-- listClients' page within a prefix's range, from low to below high: the clientIds that
-- start with it (auth_rows.prefix_range).
SELECT client_id, description, encrypted_access_token, scopes, expires, delete_on_expiration,
       disabled, created, last_modified, last_date_used, last_rotated, version
FROM auth_clients
WHERE client_id > :after AND client_id >= :low AND client_id < :high
ORDER BY client_id LIMIT :limit

-- name: update_client
-- Every column but the key and created, only while the stored version is still the one read.
-- last_date_used only rises: mark_clients_used may have raised it since the client was read.
UPDATE auth_clients
SET description = :description, encrypted_access_token = :encrypted_access_token,
    scopes = :scopes, expires = :expires, delete_on_expiration = :delete_on_expiration,
    disabled = :disabled, last_modified = :last_modified,
    last_date_used = CASE WHEN last_date_used > :last_date_used THEN last_date_used
                          ELSE :last_date_used END,
    last_rotated = :last_rotated, version = version + 1
WHERE client_id = :client_id AND version = :version
RETURNING client_id, description, encrypted_access_token, scopes, expires,
          delete_on_expiration, disabled, created, last_modified, last_date_used,
          last_rotated, version

-- name: delete_client
DELETE FROM auth_clients WHERE client_id = :client_id RETURNING client_id

-- name: expired_clients
-- The expiry sweep's scan: clients to delete on expiration that expired, the earliest first.
SELECT client_id, description, encrypted_access_token, scopes, expires, delete_on_expiration,
       disabled, created, last_modified, last_date_used, last_rotated, version
FROM auth_clients
WHERE delete_on_expiration AND expires < :now
ORDER BY expires, client_id LIMIT :limit

-- name: get_roles
-- Every role and the roles' version, in one statement (one snapshot); without roles, one row
-- with the version and a NULL role_id.
SELECT s.roles_version, r.role_id, r.scopes, r.description, r.created, r.last_modified
FROM auth_state AS s LEFT JOIN auth_roles AS r ON TRUE
WHERE s.id = 1
ORDER BY r.role_id

-- name: write_roles_version
-- write_roles' compare-and-set: no row back means another write won meanwhile. Holds the row
-- until the transaction ends, so role writes take turns.
UPDATE auth_state
SET roles_version = roles_version + 1, generation = generation + 1
WHERE id = 1 AND roles_version = :expected_version
RETURNING roles_version

-- name: upsert_role
-- A role written again as it is stays untouched.
INSERT INTO auth_roles (role_id, scopes, description, created, last_modified)
VALUES (:role_id, :scopes, :description, :created, :last_modified)
ON CONFLICT (role_id) DO UPDATE
SET scopes = excluded.scopes, description = excluded.description,
    created = excluded.created, last_modified = excluded.last_modified
WHERE auth_roles.scopes <> excluded.scopes OR auth_roles.description <> excluded.description
   OR auth_roles.created <> excluded.created
   OR auth_roles.last_modified <> excluded.last_modified

-- name: bump_auth_generation
UPDATE auth_state SET generation = generation + 1 WHERE id = 1

-- name: auth_generation
SELECT generation FROM auth_state WHERE id = 1

-- name: insert_audit_entry
INSERT INTO auth_audit (entity_type, entity_id, client_id, action_type, created)
VALUES (:entity_type, :entity_id, :client_id, :action_type, :created)

-- name: audit_of_entity
-- getEntityHistory's page, after the previous page's last (created, sequence); only the
-- changes of one client if client_id is not NULL.
SELECT sequence, entity_type, entity_id, client_id, action_type, created
FROM auth_audit
WHERE entity_type = :entity_type AND entity_id = :entity_id
  AND (created, sequence) > (:after_created, :after_sequence)
  AND (CAST(:client_id AS TEXT) IS NULL OR client_id = :client_id)
ORDER BY created, sequence LIMIT :limit

-- name: audit_by_client
-- listAuditHistory's page: the changes a client made, after the previous page's last
-- (created, sequence); only those of one entity type if entity_type is not NULL.
SELECT sequence, entity_type, entity_id, client_id, action_type, created
FROM auth_audit
WHERE client_id = :client_id
  AND (created, sequence) > (:after_created, :after_sequence)
  AND (CAST(:entity_type AS TEXT) IS NULL OR entity_type = :entity_type)
ORDER BY created, sequence LIMIT :limit

-- name: insert_secret
INSERT INTO secrets (name, encrypted_value, expires)
VALUES (:secret_name, :encrypted_value, :expires)
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: update_secret
UPDATE secrets SET encrypted_value = :encrypted_value, expires = :expires
WHERE name = :secret_name
RETURNING name

-- name: get_secret
SELECT name, encrypted_value, expires FROM secrets WHERE name = :secret_name

-- name: list_secrets
-- list's page: the names of the secrets not expired, after the previous page's last.
SELECT name FROM secrets
WHERE expires >= :now AND name > :after
ORDER BY name LIMIT :limit

-- name: delete_secret
-- With expired_before NULL, whatever its expiry; else only if it expired before then.
DELETE FROM secrets
WHERE name = :secret_name AND (CAST(:expired_before AS BIGINT) IS NULL OR expires < :expired_before)
RETURNING name

-- name: expired_secrets
SELECT name FROM secrets WHERE expires < :now ORDER BY expires, name LIMIT :limit

-- name: purge_cache
-- A purge again raises the row's purge_before and expires, never lowers them.
INSERT INTO cache_purges (provisioner_id, worker_type, cache_name, purge_before, expires)
VALUES (:provisioner_id, :worker_type, :cache_name, :purge_before, :expires)
ON CONFLICT (provisioner_id, worker_type, cache_name) DO UPDATE
SET purge_before = CASE WHEN cache_purges.purge_before > excluded.purge_before
                        THEN cache_purges.purge_before ELSE excluded.purge_before END,
    expires = CASE WHEN cache_purges.expires > excluded.expires
                   THEN cache_purges.expires ELSE excluded.expires END
RETURNING provisioner_id, worker_type, cache_name, purge_before, expires

-- name: purge_requests
SELECT provisioner_id, worker_type, cache_name, purge_before, expires FROM cache_purges
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND purge_before >= :since
ORDER BY cache_name

-- name: all_purge_requests
-- allPurgeRequests' page, after the previous page's last (provisioner, worker type, cache).
SELECT provisioner_id, worker_type, cache_name, purge_before, expires FROM cache_purges
WHERE (provisioner_id, worker_type, cache_name) > (:provisioner_id, :worker_type, :cache_name)
ORDER BY provisioner_id, worker_type, cache_name LIMIT :limit

-- name: expire_purge_requests
DELETE FROM cache_purges
WHERE (provisioner_id, worker_type, cache_name) IN (
    SELECT provisioner_id, worker_type, cache_name FROM cache_purges
    WHERE expires < :now ORDER BY expires LIMIT :limit)
RETURNING provisioner_id

-- name: insert_deduplication_key
-- Claims a free key; no row when another task holds it.
INSERT INTO deduplication_keys (task_queue_id, deduplication_key, task_id, expires)
VALUES (:task_queue_id, :deduplication_key, :task_id, :expires)
ON CONFLICT (task_queue_id, deduplication_key) DO NOTHING
RETURNING task_id

-- name: take_over_deduplication_key
-- Moves a key from the holder the creator read (compare-and-set); no row when it moved since.
UPDATE deduplication_keys SET task_id = :task_id, expires = :expires
WHERE task_queue_id = :task_queue_id AND deduplication_key = :deduplication_key
  AND task_id = :holder
RETURNING task_id

-- name: deduplication_key_holder
SELECT task_id FROM deduplication_keys
WHERE task_queue_id = :task_queue_id AND deduplication_key = :deduplication_key

-- name: delete_expired_deduplication_keys
DELETE FROM deduplication_keys WHERE (task_queue_id, deduplication_key) IN (
    SELECT task_queue_id, deduplication_key FROM deduplication_keys
    WHERE expires <= :now ORDER BY expires LIMIT :limit
)

-- name: set_run_progress
-- Only while the task is running: a report racing the run's resolution writes nothing.
INSERT INTO run_progress (task_id, run_id, fraction, message, updated)
SELECT task_id, CAST(:run_id AS INTEGER), :fraction, :message, :updated
FROM tasks WHERE task_id = :task_id AND state = 'running'
ON CONFLICT (task_id, run_id) DO UPDATE
SET fraction = excluded.fraction, message = excluded.message, updated = excluded.updated
RETURNING run_id

-- name: run_progress
SELECT task_id, run_id, fraction, message, updated FROM run_progress
WHERE task_id = :task_id ORDER BY run_id

-- name: running_by_key
-- A task queue's running runs per concurrency key (maxRunningPerKey), from tasks_running_by_key.
SELECT concurrency_key, count(*) AS running FROM tasks
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type
  AND state = 'running' AND concurrency_key IS NOT NULL
GROUP BY concurrency_key

-- name: key_turns
-- Whose turn it is among a task queue's concurrency keys ('' for its tasks without a key).
SELECT concurrency_key, served FROM concurrency_key_turns
WHERE provisioner_id = :provisioner_id AND worker_type = :worker_type

-- name: set_key_turn
INSERT INTO concurrency_key_turns (provisioner_id, worker_type, concurrency_key, served, expires)
VALUES (:provisioner_id, :worker_type, :concurrency_key, :served, :expires)
ON CONFLICT (provisioner_id, worker_type, concurrency_key) DO UPDATE
SET served = excluded.served, expires = excluded.expires

-- name: delete_expired_key_turns
DELETE FROM concurrency_key_turns WHERE (provisioner_id, worker_type, concurrency_key) IN (
    SELECT provisioner_id, worker_type, concurrency_key FROM concurrency_key_turns
    WHERE expires <= :now ORDER BY expires LIMIT :limit
)
