-- The auth service (coordinator.domain.clients): the clients its API manages, the roles, the
-- audit history of both, and auth_state. A client's encrypted_access_token is what the
-- service's cipher made of its accessToken; scopes are a compact JSON array of text; version
-- is the client's compare-and-set version. Roles are written as one set: auth_state's one row
-- holds their version (0 before the first write; compare-and-set on it) and the generation,
-- which every write of a client or of the roles bumps in its transaction, and which every
-- replica polls to know when to reload them. Audit entries stay after their entity is
-- deleted; sequence orders those of one millisecond.
CREATE TABLE auth_clients (
    client_id              TEXT PRIMARY KEY,
    description            TEXT NOT NULL,
    encrypted_access_token BLOB NOT NULL,
    scopes                 TEXT NOT NULL,
    expires                INTEGER NOT NULL,
    delete_on_expiration   INTEGER NOT NULL,
    disabled               INTEGER NOT NULL,
    created                INTEGER NOT NULL,
    last_modified          INTEGER NOT NULL,
    last_date_used         INTEGER NOT NULL,
    last_rotated           INTEGER NOT NULL,
    version                INTEGER NOT NULL
);
-- the expiry sweep's scan
CREATE INDEX auth_clients_expiring ON auth_clients (expires, client_id)
    WHERE delete_on_expiration;
CREATE TABLE auth_roles (
    role_id       TEXT PRIMARY KEY,
    scopes        TEXT NOT NULL,
    description   TEXT NOT NULL,
    created       INTEGER NOT NULL,
    last_modified INTEGER NOT NULL
);
CREATE TABLE auth_state (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    roles_version INTEGER NOT NULL,
    generation    INTEGER NOT NULL
);
INSERT INTO auth_state (id, roles_version, generation) VALUES (1, 0, 0);
CREATE TABLE auth_audit (
    sequence    INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_type TEXT NOT NULL,
    entity_id   TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    action_type TEXT NOT NULL,
    created     INTEGER NOT NULL
);
-- getEntityHistory's and listAuditHistory's pages
CREATE INDEX auth_audit_by_entity ON auth_audit (entity_type, entity_id, created, sequence);
CREATE INDEX auth_audit_by_client ON auth_audit (client_id, created, sequence);
