package db

import (
	"encoding/json"
	"fmt"
)

// This file holds a session's usage accounting and budget: the counters
// the api-server adds to in the transaction that appends the event
// carrying a model request's usage, and the budget they are held against.
// Timing (active and elapsed time) is beside the state machine, in
// status.go.

// NanosPerCent is how many nano-USD make one US cent, the minor unit of a
// BetaMonetaryAmount.
const NanosPerCent = 10_000_000

// Usage is a session's cumulative model usage, or the usage of one model
// request: exact integer counters, and the list cost in nano-USD (10⁻⁹
// USD), so that sums never drift. It is stored as JSON in sessions.usage.
type Usage struct {
	InputTokens          int64 `json:"input_tokens,omitempty"`
	OutputTokens         int64 `json:"output_tokens,omitempty"`
	CacheReadInputTokens int64 `json:"cache_read_input_tokens,omitempty"`
	// CacheCreation5m and CacheCreation1h are the input tokens written to
	// 5-minute and 1-hour prompt cache entries.
	CacheCreation5m   int64 `json:"cache_creation_5m_input_tokens,omitempty"`
	CacheCreation1h   int64 `json:"cache_creation_1h_input_tokens,omitempty"`
	WebSearchRequests int64 `json:"web_search_requests,omitempty"`
	WebFetchRequests  int64 `json:"web_fetch_requests,omitempty"`
	// ListCostNanos is the list cost in nano-USD.
	ListCostNanos int64 `json:"list_cost_nanos,omitempty"`
	// Unpriced is set once usage of a model without a list price was
	// counted: the list cost then understates the spend, and a budget can
	// no longer be enforced.
	Unpriced bool `json:"unpriced,omitempty"`
}

// Add adds d to u.
func (u *Usage) Add(d Usage) {
	u.InputTokens += d.InputTokens
	u.OutputTokens += d.OutputTokens
	u.CacheReadInputTokens += d.CacheReadInputTokens
	u.CacheCreation5m += d.CacheCreation5m
	u.CacheCreation1h += d.CacheCreation1h
	u.WebSearchRequests += d.WebSearchRequests
	u.WebFetchRequests += d.WebFetchRequests
	u.ListCostNanos += d.ListCostNanos
	u.Unpriced = u.Unpriced || d.Unpriced
}

// Sub takes d (a part of u, as a child thread's usage is of its
// session's) from u. Unpriced stays as it is.
func (u *Usage) Sub(d Usage) {
	u.InputTokens -= d.InputTokens
	u.OutputTokens -= d.OutputTokens
	u.CacheReadInputTokens -= d.CacheReadInputTokens
	u.CacheCreation5m -= d.CacheCreation5m
	u.CacheCreation1h -= d.CacheCreation1h
	u.WebSearchRequests -= d.WebSearchRequests
	u.WebFetchRequests -= d.WebFetchRequests
	u.ListCostNanos -= d.ListCostNanos
}

// ListCostCents is the list cost in whole US cents, rounded down (the
// budget itself compares the exact nano-USD amount).
func (u *Usage) ListCostCents() int64 { return u.ListCostNanos / NanosPerCent }

func usageFromJSON(sessionID string, raw json.RawMessage) (Usage, error) {
	var u Usage
	if len(raw) == 0 || string(raw) == "{}" {
		return u, nil // a session without usage yet: nothing to decode
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		return u, fmt.Errorf("decode usage of session %s: %w", sessionID, err)
	}
	return u, nil
}

func (u *Usage) json() json.RawMessage {
	b, _ := json.Marshal(u) // a struct of integers and a bool cannot fail
	return b
}

// HasBudget reports whether the session has a budget.
func (s *Session) HasBudget() bool { return s.BudgetMaxCents != nil }

// BudgetExhausted reports whether the session may make no further model
// request: it has a budget and its list cost reached it, or usage of an
// unpriced model makes the cost unmeasurable.
func (s *Session) BudgetExhausted() bool {
	if s.BudgetMaxCents == nil {
		return false
	}
	return s.Usage.Unpriced || s.Usage.ListCostNanos >= *s.BudgetMaxCents*NanosPerCent
}

// Budget update refusals, checked by CheckBudgetUpdate.
var (
	// ErrBudgetCreateOnly: a budget cannot be added to a session created
	// without one, nor added back once removed.
	ErrBudgetCreateOnly = fmt.Errorf("budget_create_only: %w", ErrConflict)
	// ErrBudgetNotRaised: a new budget must be above the consumed list
	// cost.
	ErrBudgetNotRaised = fmt.Errorf("budget_not_raised: %w", ErrConflict)
)

// CheckBudgetUpdate applies a budget update to cur: maxCents nil removes
// the budget, otherwise it replaces it. It refuses what the public API
// refuses: adding a budget to a session that has none (never had one, or
// had it removed), and a new maximum at or below the consumed list cost.
// Removing the budget of a session without one changes nothing.
func CheckBudgetUpdate(cur *Session, maxCents *int64) error {
	if maxCents == nil {
		if cur.BudgetMaxCents != nil {
			cur.BudgetMaxCents, cur.BudgetRemoved = nil, true
		}
		return nil
	}
	if cur.BudgetMaxCents == nil {
		return ErrBudgetCreateOnly
	}
	if *maxCents*NanosPerCent <= cur.Usage.ListCostNanos {
		return ErrBudgetNotRaised
	}
	v := *maxCents
	cur.BudgetMaxCents = &v
	return nil
}
