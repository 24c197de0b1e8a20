-- The indexes of tasks that only listings used, which read task_listing since migration 0027
-- (release 0.2.0, whose replicas are the previous release's now and filter through it too).
-- Every transition of a task added an entry to each of them (docs/operations.md, "Vacuum and
-- bloat"): three fewer entries a write.
-- unused since 0.2.0: tasks_by_scheduler, tasks_by_project, tasks_by_created
DROP INDEX tasks_by_scheduler;
DROP INDEX tasks_by_project;
DROP INDEX tasks_by_created;
