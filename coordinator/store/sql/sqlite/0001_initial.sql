-- One row per task. The definition is written once; the status columns change only through
-- compare-and-set on `version`. taken_until, open_deadline, hint_due and notify_dependents
-- are derived from the status so the resolvers scan small partial indexes.
CREATE TABLE tasks (
    task_id           TEXT PRIMARY KEY,
    task_group_id     TEXT NOT NULL,
    scheduler_id      TEXT NOT NULL,
    provisioner_id    TEXT NOT NULL,
    worker_type       TEXT NOT NULL,
    expires           INTEGER NOT NULL,
    definition        TEXT NOT NULL,
    retries_left      INTEGER NOT NULL,
    runs              TEXT NOT NULL,
    state             TEXT NOT NULL,
    taken_until       INTEGER,
    open_deadline     INTEGER,
    hint_due          INTEGER,
    notify_dependents INTEGER NOT NULL,
    version           INTEGER NOT NULL
);
CREATE INDEX tasks_by_group ON tasks (task_group_id, task_id);
CREATE INDEX tasks_by_queue_state ON tasks (provisioner_id, worker_type, state);
CREATE INDEX tasks_by_expires ON tasks (expires);
CREATE INDEX tasks_by_taken_until ON tasks (taken_until) WHERE taken_until IS NOT NULL;
CREATE INDEX tasks_by_open_deadline ON tasks (open_deadline) WHERE open_deadline IS NOT NULL;
CREATE INDEX tasks_by_hint_due ON tasks (hint_due) WHERE hint_due IS NOT NULL;
CREATE INDEX tasks_to_notify ON tasks (task_id) WHERE notify_dependents = 1;

CREATE TABLE task_dependencies (
    required_task_id  TEXT NOT NULL,
    dependent_task_id TEXT NOT NULL,
    PRIMARY KEY (required_task_id, dependent_task_id)
) WITHOUT ROWID;
CREATE INDEX task_dependencies_by_dependent ON task_dependencies (dependent_task_id);
