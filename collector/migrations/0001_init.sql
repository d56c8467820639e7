-- Collector schema, version 1. Runs unchanged on SQLite and PostgreSQL: TEXT and BIGINT columns only.
CREATE TABLE tokens (
    hash TEXT PRIMARY KEY,          -- SHA-256 of the token, lowercase hex
    project TEXT NOT NULL,
    label TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    revoked_ms BIGINT
);

CREATE TABLE reports (
    id TEXT PRIMARY KEY,            -- report id, uppercase dashed UUID
    project TEXT NOT NULL,
    file TEXT NOT NULL,             -- name under <store>/reports/, chosen by the collector
    size BIGINT NOT NULL,
    received_ms BIGINT NOT NULL,
    captured_ms BIGINT,
    problems TEXT NOT NULL,         -- empty when intact; one damage sentence per line otherwise
    group_id TEXT NOT NULL,
    app_version TEXT NOT NULL,
    os_version TEXT NOT NULL,
    process TEXT NOT NULL,
    exception TEXT NOT NULL,
    image_ids TEXT NOT NULL         -- ' id1 id2 ... ' (lowercase hex UUIDs / build IDs)
);
CREATE INDEX reports_by_group ON reports (group_id, received_ms);
CREATE INDEX reports_by_version ON reports (app_version, group_id, received_ms);
CREATE INDEX reports_by_received ON reports (received_ms);

CREATE TABLE groups (
    id TEXT PRIMARY KEY,            -- 16 hex digits of SHA-256(project, signature)
    project TEXT NOT NULL,
    signature TEXT NOT NULL,
    title TEXT NOT NULL,
    exception TEXT NOT NULL,
    stack TEXT NOT NULL             -- crashed thread of the newest report analysed into the group, one frame a line
);

CREATE TABLE debug_files (
    debug_id TEXT NOT NULL,         -- UUID / build ID, lowercase hex
    arch TEXT NOT NULL,
    file TEXT NOT NULL,             -- name under the debug-file root, chosen by the collector
    has_dwarf BIGINT NOT NULL,
    size BIGINT NOT NULL,
    uploaded_ms BIGINT NOT NULL,
    PRIMARY KEY (debug_id, arch)
);
