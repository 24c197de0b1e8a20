-- Every task passes through pending, running and a resolution, and an index keyed by the state
-- and then by the random task id rewrote two random pages of it on each of those steps: a
-- third of what SQLite spent on a claim and a report (docs/performance.md). The counts now
-- read an index in the order its entries come and go (pending ones by visible_at: added at
-- the end, claimed from the front; the others, whose visible_at is NULL, in insertion order),
-- and the listings of a queue walk one written only when a task is inserted, reading the
-- state from the row.
DROP INDEX tasks_by_queue_state;
CREATE INDEX tasks_by_queue_state ON tasks (provisioner_id, worker_type, state, visible_at);
CREATE INDEX tasks_by_queue ON tasks (provisioner_id, worker_type, task_id);
-- Likewise every resolution deleted a random entry of this one; cancelTaskGroup and
-- changeTaskGroupPriority now page through the group's tasks by tasks_by_group and skip the
-- resolved ones, one pass over the group in all.
DROP INDEX tasks_unresolved_by_group;
