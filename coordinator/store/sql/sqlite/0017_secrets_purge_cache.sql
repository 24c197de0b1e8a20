-- The secrets service (coordinator.domain.secrets): each secret's value as the service's cipher
-- encrypted it (bound to its name), and its expiry; its audit entries go to auth_audit
-- (entity_type 'secret'). The purge-cache service (coordinator.domain.purge_cache): one row per
-- task queue and cacheName, whose purge_before each purge raises, deleted after expires.
CREATE TABLE secrets (
    name            TEXT PRIMARY KEY,
    encrypted_value BLOB NOT NULL,
    expires         INTEGER NOT NULL
);
-- the expiry sweep's scan
CREATE INDEX secrets_expiring ON secrets (expires, name);
CREATE TABLE cache_purges (
    provisioner_id TEXT NOT NULL,
    worker_type    TEXT NOT NULL,
    cache_name     TEXT NOT NULL,
    purge_before   INTEGER NOT NULL,
    expires        INTEGER NOT NULL,
    PRIMARY KEY (provisioner_id, worker_type, cache_name)
);
-- the expiry sweep's scan
CREATE INDEX cache_purges_expiring ON cache_purges (expires);
