-- Collector schema, version 2: per-(group, app version) counters, so the groups page reads a few hundred rows
-- instead of aggregating every report. Kept in step with reports by the collector (incremented in the ingest
-- transaction, recomputed from reports when regrouping moves a report). Same SQL on SQLite and PostgreSQL.
CREATE TABLE group_stats (
    group_id TEXT NOT NULL,
    app_version TEXT NOT NULL,
    project TEXT NOT NULL,
    count BIGINT NOT NULL,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    PRIMARY KEY (group_id, app_version)
);
INSERT INTO group_stats (group_id, app_version, project, count, first_seen_ms, last_seen_ms)
    SELECT group_id, app_version, MIN(project), COUNT(*), MIN(received_ms), MAX(received_ms)
    FROM reports GROUP BY group_id, app_version;
CREATE INDEX group_stats_by_version ON group_stats (app_version);
