-- Task groups as records: their schedulerId, the latest expiry of their tasks, and when they
-- were sealed (no task may join a sealed group). Every task insert upserts its group in the
-- same statement, under the group row's lock, so sealing and creating cannot interleave.
CREATE TABLE task_groups (
    task_group_id TEXT COLLATE "C" PRIMARY KEY,
    scheduler_id  TEXT NOT NULL,
    expires       BIGINT NOT NULL,
    sealed        BIGINT
);
INSERT INTO task_groups (task_group_id, scheduler_id, expires)
SELECT task_group_id, min(scheduler_id), max(expires) FROM tasks GROUP BY task_group_id;
CREATE INDEX task_groups_by_expires ON task_groups (expires);
-- cancelTaskGroup and changeTaskGroupPriority page through a group's unresolved tasks
CREATE INDEX tasks_unresolved_by_group ON tasks (task_group_id, task_id)
    WHERE open_deadline IS NOT NULL;
