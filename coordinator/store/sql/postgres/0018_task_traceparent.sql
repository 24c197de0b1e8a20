-- Tracing (docs/operations.md#tracing): the W3C traceparent of the createTask span that made the
-- task, so each claim of one of its runs continues the task's trace. NULL for a task created
-- with tracing off, by a hook, or before this column existed.
ALTER TABLE tasks ADD COLUMN traceparent TEXT;
