-- What only the management API filters tasks by, kept apart from the tasks table (docs/
-- operations.md, "Vacuum and bloat"). A task's schedulerId, projectId and created never
-- change, but every transition writes a new version of its tasks row, and since each changes
-- an indexed column (state, taken_until, ...) none is a HOT update: PostgreSQL adds an entry
-- to every index of tasks for each version. The indexes of these three columns took about a
-- fifth of the database's CPU a task under store dispatch (docs/performance-history.md). Here
-- they are written once, when the task is inserted.
--
-- Statement triggers keep the table, so that every writer of tasks keeps it, a replica of
-- the previous release during a rolling upgrade included, and a createTasks of many tasks
-- pays for one trigger call, not one a task.
--
-- The tasks indexes of the three columns (tasks_by_scheduler, tasks_by_project,
-- tasks_by_created) stay until the release after the one that brings this table: the previous
-- release's replicas filter through them during a rolling upgrade (docs/operations.md,
-- Upgrading).
CREATE TABLE task_listing (
    task_id      TEXT COLLATE "C" PRIMARY KEY,
    scheduler_id TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    created      BIGINT NOT NULL
);

CREATE FUNCTION queue_list_inserted_tasks() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_listing (task_id, scheduler_id, project_id, created)
    SELECT task_id, scheduler_id, project_id, created FROM inserted_tasks;
    RETURN NULL;
END
$$;

CREATE FUNCTION queue_unlist_deleted_tasks() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_listing USING deleted_tasks
    WHERE task_listing.task_id = deleted_tasks.task_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_listed AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS inserted_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION queue_list_inserted_tasks();
CREATE TRIGGER tasks_unlisted AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS deleted_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION queue_unlist_deleted_tasks();

INSERT INTO task_listing (task_id, scheduler_id, project_id, created)
SELECT task_id, scheduler_id, project_id, created FROM tasks;

CREATE INDEX task_listing_by_scheduler ON task_listing (scheduler_id, task_id);
CREATE INDEX task_listing_by_project ON task_listing (project_id, task_id);
CREATE INDEX task_listing_by_created ON task_listing (created);
ANALYZE task_listing;

