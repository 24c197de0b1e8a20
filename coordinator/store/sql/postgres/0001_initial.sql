-- One row per task. The definition is written once; the status columns change only through
-- compare-and-set on `version`. taken_until, open_deadline, hint_due and notify_dependents
-- are derived from the status so the resolvers scan small partial indexes.
--
-- Task ids and group ids use the "C" collation: listings page with `task_id > after` and
-- must order exactly as SQLite does (by code point), whatever the database's locale; a
-- linguistic collation would sort '-' and '_' and letter case differently, and compare slower.
-- definition and runs are compact JSON kept as text: the database never looks inside them
-- except for one row in confirm_hint, and text skips jsonb's parse on every write and its
-- re-serialisation on every read.
CREATE TABLE tasks (
    task_id           TEXT COLLATE "C" PRIMARY KEY,
    task_group_id     TEXT COLLATE "C" NOT NULL,
    scheduler_id      TEXT NOT NULL,
    provisioner_id    TEXT NOT NULL,
    worker_type       TEXT NOT NULL,
    expires           BIGINT NOT NULL,
    definition        TEXT NOT NULL,
    retries_left      INTEGER NOT NULL,
    runs              TEXT NOT NULL,
    state             TEXT NOT NULL,
    taken_until       BIGINT,
    open_deadline     BIGINT,
    hint_due          BIGINT,
    notify_dependents BOOLEAN NOT NULL,
    version           INTEGER NOT NULL
);
CREATE INDEX tasks_by_group ON tasks (task_group_id, task_id);
CREATE INDEX tasks_by_queue_state ON tasks (provisioner_id, worker_type, state);
CREATE INDEX tasks_by_expires ON tasks (expires);
CREATE INDEX tasks_by_taken_until ON tasks (taken_until) WHERE taken_until IS NOT NULL;
CREATE INDEX tasks_by_open_deadline ON tasks (open_deadline) WHERE open_deadline IS NOT NULL;
CREATE INDEX tasks_by_hint_due ON tasks (hint_due) WHERE hint_due IS NOT NULL;
CREATE INDEX tasks_to_notify ON tasks (task_id) WHERE notify_dependents;

CREATE TABLE task_dependencies (
    required_task_id  TEXT COLLATE "C" NOT NULL,
    dependent_task_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (required_task_id, dependent_task_id)
);
CREATE INDEX task_dependencies_by_dependent ON task_dependencies (dependent_task_id);
