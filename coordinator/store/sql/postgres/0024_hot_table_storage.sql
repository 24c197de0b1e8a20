-- Storage parameters of the tables every claim, report or event rewrites (docs/operations.md,
-- "Vacuum and bloat"). Only reloptions change: ALTER TABLE ... SET takes a SHARE UPDATE
-- EXCLUSIVE lock, which blocks neither reads nor writes, rewrites nothing (a fillfactor
-- applies to pages filled from now on) and means the same to a previous release's code.
--
-- fillfactor leaves room on each page for the next version of its rows: an update then
-- writes the new version beside the old one (a HOT update when no indexed column changed),
-- so the heap does not grow by a page per batch of updates.
-- Autovacuum by default waits for 20 % of a table to be dead and then works at a throttled
-- pace; a queue's tables churn far faster than that, so they are vacuumed after a fixed
-- number of dead rows, the small ones unthrottled.

-- tasks: every transition rewrites the row (state, runs, taken_until, pending_priority ...).
-- It is large (tasks are kept until they expire), so vacuum after 2 % dead rather than 20 %,
-- and five times the default cost limit so that one pass keeps up with the churn.
ALTER TABLE tasks SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 2,
    autovacuum_vacuum_cost_limit = 1000
);

-- Queue-shaped tables whose live rows are few while rows pass through them by the thousand:
-- vacuumed and analyzed after a fixed number of changes whatever their size, unthrottled
-- (vacuuming a small table is cheap; a throttled one falls behind and bloats).
ALTER TABLE queue_event_outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE task_inbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- One row per task queue, worker or concurrency key, rewritten by every sighting or claim;
-- run_progress: one row per run, rewritten by every reportProgress (only its primary key is
-- indexed, so those updates are HOT when the page has room).
ALTER TABLE task_queues SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE workers SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE concurrency_key_turns SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE run_progress SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
