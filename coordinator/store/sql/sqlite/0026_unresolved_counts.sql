-- How many of each group's tasks are unresolved (open_deadline set), kept by the store's
-- writes of tasks in their transaction: a resolving write with publishing on asks whether its
-- group has any left (task-group-resolved, docs/events.md). Read from the tasks, that question
-- walked the group's tasks by id from the start, skipping the resolved ones (SQLite has no
-- partial index of the unresolved since 0006): 0.6 ms a resolving batch in a group of 50,000
-- tasks with 100 unresolved, and the whole group whenever none were left. Not triggers: a
-- table with one makes every insert and update of it write a statement journal.
ALTER TABLE task_groups ADD COLUMN unresolved INTEGER NOT NULL DEFAULT 0;
UPDATE task_groups SET unresolved = (
    SELECT count(*) FROM tasks
    WHERE tasks.task_group_id = task_groups.task_group_id AND open_deadline IS NOT NULL
);
