package db

import (
	"context"
	"encoding/json"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// TranscriptEntry is one provider-native message of a session's provider
// transcript.
type TranscriptEntry struct {
	Key  string
	Body json.RawMessage
	// Seq is the entry's position, set when it is read: increasing in the
	// order entries were stored.
	Seq int64
}

// TranscriptAppend stores transcript entries in order, skipping keys
// already stored, and returns how many were new. ErrNotFound when the
// session does not exist.
//
// Every writer of a session's transcript holds the session's row lock
// (as Append does), so entries take their seq in commit order: a reader
// that saw up to seq n never sees an entry at or below n appear later,
// which is what reading only the entries after n relies on.
func (s *Store) TranscriptAppend(ctx context.Context, sessionID string, entries []TranscriptEntry) (int, error) {
	n := 0
	err := s.inTx(ctx, "append transcript", func(q *dbsqlc.Queries) error {
		if _, err := q.SessionLock(ctx, sessionID); err != nil {
			return err
		}
		for _, e := range entries {
			rows, err := q.TranscriptEntryInsert(ctx, dbsqlc.TranscriptEntryInsertParams{SessionID: sessionID, EntryKey: e.Key, Body: e.Body})
			if err != nil {
				return err
			}
			n += int(rows)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Transcript returns a session's provider transcript in append order:
// the entries after position afterSeq (0: all of them).
func (s *Store) Transcript(ctx context.Context, sessionID string, afterSeq int64) ([]TranscriptEntry, error) {
	rows, err := s.q.TranscriptEntryList(ctx, dbsqlc.TranscriptEntryListParams{SessionID: sessionID, AfterSeq: afterSeq})
	if err != nil {
		return nil, mapErr("list transcript", err)
	}
	return transcriptFromRows(rows), nil
}

func transcriptFromRows(rows []dbsqlc.TranscriptEntryListRow) []TranscriptEntry {
	out := make([]TranscriptEntry, 0, len(rows))
	for _, r := range rows {
		out = append(out, TranscriptEntry{Key: r.EntryKey, Body: r.Body, Seq: r.Seq})
	}
	return out
}
