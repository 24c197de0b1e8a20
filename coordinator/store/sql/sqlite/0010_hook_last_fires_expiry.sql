-- The last-fire sweeper's scan: last fires older than a year are deleted (Taskcluster's rule).
CREATE INDEX hook_last_fires_by_create_time ON hook_last_fires (task_create_time);
