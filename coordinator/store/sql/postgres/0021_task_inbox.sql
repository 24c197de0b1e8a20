-- The task inbox (docs/tasks.md#transactional-enqueue): producers INSERT createTask requests
-- in their own transactions (worker_sdk.enqueue_in); the inbox ingester turns each committed
-- row into a task as the client the row names, then deletes it, or keeps it as 'rejected' with
-- the reason. The definition is TEXT, not JSONB, so that a row that is not JSON is kept and
-- refused with its reason rather than failing the producer's INSERT.
CREATE TABLE task_inbox (
    id          BIGSERIAL PRIMARY KEY,
    task_id     TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    definition  TEXT NOT NULL,
    created     TIMESTAMPTZ NOT NULL DEFAULT now(),
    state       TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'rejected')),
    reason      TEXT
);
-- the ingester's scan and the operators' listing of rejected rows
CREATE INDEX task_inbox_state ON task_inbox (state, id);
-- Every committed INSERT wakes the ingesters listening (NOTIFY is delivered on commit only, so
-- a rolled-back transaction wakes nobody).
CREATE FUNCTION task_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queue_coordinator_inbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER task_inbox_notify AFTER INSERT ON task_inbox
    FOR EACH STATEMENT EXECUTE FUNCTION task_inbox_notify();
