-- +goose Up

-- Context snapshots: the compacted, model-facing projections of a session's
-- conversation (see execution-worker/agentruntime/context.go). Each one
-- replaces the first `covered` messages of the provider transcript, which
-- itself is never changed. Snapshots are immutable and keyed like events:
-- the first write of a key wins, so a retried compaction continues from
-- the stored projection. The newest one (highest seq) is in force.
CREATE TABLE context_snapshots (
    session_id    text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           bigserial,
    snapshot_key  text NOT NULL,
    covered       integer NOT NULL CHECK (covered >= 0),
    body          json NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, snapshot_key)
);

CREATE INDEX context_snapshots_seq_idx ON context_snapshots (session_id, seq);

-- +goose Down
DROP TABLE context_snapshots;
