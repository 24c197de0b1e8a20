-- Hooks (docs/hooks.md): one row per hook. metadata, task, schedule, trigger_schema, bindings
-- and scopes (those of the client that last created or updated it) are compact JSON text.
-- next_due is when the schedule next fires (epoch ms; NULL without a schedule); the scheduler
-- advances it by compare-and-set on version.
CREATE TABLE hooks (
    hook_group_id  TEXT NOT NULL,
    hook_id        TEXT NOT NULL,
    metadata       TEXT NOT NULL,
    task           TEXT NOT NULL,
    schedule       TEXT NOT NULL,
    trigger_schema TEXT NOT NULL,
    bindings       TEXT NOT NULL,
    scopes         TEXT NOT NULL,
    trigger_token  TEXT NOT NULL,
    next_due       INTEGER,
    version        INTEGER NOT NULL,
    PRIMARY KEY (hook_group_id, hook_id)
);
-- the scheduler's scan
CREATE INDEX hooks_by_next_due ON hooks (next_due) WHERE next_due IS NOT NULL;
-- A hook's fires, one per taskId: a fire repeated after a crash writes nothing new.
CREATE TABLE hook_last_fires (
    hook_group_id    TEXT NOT NULL,
    hook_id          TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    fired_by         TEXT NOT NULL,
    task_create_time INTEGER NOT NULL,
    result           TEXT NOT NULL,
    error            TEXT NOT NULL,
    PRIMARY KEY (hook_group_id, hook_id, task_id)
);
CREATE INDEX hook_last_fires_by_time
    ON hook_last_fires (hook_group_id, hook_id, task_create_time);
