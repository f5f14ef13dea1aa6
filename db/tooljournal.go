package db

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// ToolJournalEntry records what one tool call did.
type ToolJournalEntry struct {
	SessionID string
	ToolUseID string
	Body      json.RawMessage
	CreatedAt time.Time
}

// ToolJournalRecord stores a tool call's journal entry unless one exists:
// the first write wins. It returns the stored entry and whether this call
// stored it. ErrNotFound when the session does not exist.
func (s *Store) ToolJournalRecord(ctx context.Context, sessionID, toolUseID string, body json.RawMessage) (*ToolJournalEntry, bool, error) {
	rows, err := s.q.ToolJournalInsert(ctx, dbsqlc.ToolJournalInsertParams{SessionID: sessionID, ToolUseID: toolUseID, Body: body})
	if err != nil {
		return nil, false, mapErr("record tool journal", err)
	}
	if len(rows) == 1 {
		return journalEntry(rows[0]), true, nil
	}
	e, err := s.ToolJournalGet(ctx, sessionID, toolUseID) // the first write's
	if err != nil {
		return nil, false, err
	}
	return e, false, nil
}

// ToolJournalGet returns a tool call's journal entry, or ErrNotFound.
func (s *Store) ToolJournalGet(ctx context.Context, sessionID, toolUseID string) (*ToolJournalEntry, error) {
	r, err := s.q.ToolJournalGet(ctx, dbsqlc.ToolJournalGetParams{SessionID: sessionID, ToolUseID: toolUseID})
	if err != nil {
		return nil, mapErr("get tool journal", err)
	}
	return journalEntry(r), nil
}

func journalEntry(r dbsqlc.ToolJournal) *ToolJournalEntry {
	return &ToolJournalEntry{SessionID: r.SessionID, ToolUseID: r.ToolUseID, Body: r.Body, CreatedAt: r.CreatedAt}
}
