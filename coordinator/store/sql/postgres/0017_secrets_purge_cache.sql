-- The secrets service (coordinator.domain.secrets): each secret's value as the service's cipher
-- encrypted it (bound to its name), and its expiry; its audit entries go to auth_audit
-- (entity_type 'secret'). The purge-cache service (coordinator.domain.purge_cache): one row per
-- task queue and cacheName, whose purge_before each purge raises, deleted after expires. Names
-- use the "C" collation: listings order them by code point, as SQLite does.
CREATE TABLE secrets (
    name            TEXT COLLATE "C" PRIMARY KEY,
    encrypted_value BYTEA NOT NULL,
    expires         BIGINT NOT NULL
);
-- the expiry sweep's scan
CREATE INDEX secrets_expiring ON secrets (expires, name);
CREATE TABLE cache_purges (
    provisioner_id TEXT COLLATE "C" NOT NULL,
    worker_type    TEXT COLLATE "C" NOT NULL,
    cache_name     TEXT COLLATE "C" NOT NULL,
    purge_before   BIGINT NOT NULL,
    expires        BIGINT NOT NULL,
    PRIMARY KEY (provisioner_id, worker_type, cache_name)
);
-- the expiry sweep's scan
CREATE INDEX cache_purges_expiring ON cache_purges (expires);
