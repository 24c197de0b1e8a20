-- The index service (coordinator.domain.index): the task at each index path (namespace, name)
-- and the namespaces listed above them. data is the entry's JSON object as compact text;
-- times are epoch milliseconds.
CREATE TABLE indexed_tasks (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    rank      INTEGER NOT NULL,
    task_id   TEXT NOT NULL,
    data      TEXT NOT NULL,
    expires   INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
-- the expiry sweep's scan
CREATE INDEX indexed_tasks_expiry ON indexed_tasks (expires);
CREATE TABLE index_namespaces (
    parent  TEXT NOT NULL,
    name    TEXT NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (parent, name)
);
CREATE INDEX index_namespaces_expiry ON index_namespaces (expires);
