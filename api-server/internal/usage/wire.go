package usage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/mangohq/mango/db"
)

// Money is a BetaMonetaryAmount: an integer amount of minor units (US
// cents) as a decimal string.
type Money struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

func cents(n int64) Money { return Money{Amount: strconv.FormatInt(n, 10), Currency: "USD"} }

// Budget is a BetaManagedAgentsBudgetLimit.
type Budget struct {
	Type        string `json:"type"`
	MaxListCost Money  `json:"max_list_cost"`
}

type cacheCreation struct {
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
}

type serverToolUse struct {
	WebFetchRequests  int64 `json:"web_fetch_requests"`
	WebSearchRequests int64 `json:"web_search_requests"`
}

// Usage is a session's usage as BetaManagedAgentsSessionUsage (and, with
// the same members, BetaManagedAgentsSessionUsageSnapshot) shows it. The
// list cost is rounded down to whole cents.
type Usage struct {
	InputTokens          int64         `json:"input_tokens"`
	OutputTokens         int64         `json:"output_tokens"`
	CacheReadInputTokens int64         `json:"cache_read_input_tokens"`
	CacheCreation        cacheCreation `json:"cache_creation"`
	ServerToolUse        serverToolUse `json:"server_tool_use"`
	ListCost             Money         `json:"list_cost"`
	ActiveSeconds        float64       `json:"active_seconds"`
}

// Stats is a BetaManagedAgentsSessionStats.
type Stats struct {
	ActiveSeconds   float64 `json:"active_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// Of returns the session's usage at now.
func Of(s *db.Session, now time.Time) Usage {
	u := &s.Usage
	return Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadInputTokens: u.CacheReadInputTokens,
		CacheCreation: cacheCreation{Ephemeral1h: u.CacheCreation1h, Ephemeral5m: u.CacheCreation5m},
		ServerToolUse: serverToolUse{WebFetchRequests: u.WebFetchRequests, WebSearchRequests: u.WebSearchRequests},
		ListCost:      cents(u.ListCostCents()), ActiveSeconds: s.ActiveSeconds(now)}
}

// StatsOf returns the session's stats at now.
func StatsOf(s *db.Session, now time.Time) Stats {
	return Stats{ActiveSeconds: s.ActiveSeconds(now), DurationSeconds: s.DurationSeconds(now)}
}

// BudgetOf returns the session's budget, or nil.
func BudgetOf(s *db.Session) *Budget { return BudgetOfCents(s.BudgetMaxCents) }

// BudgetOfCents is the wire form of a budget of maxCents US cents; nil
// without one.
func BudgetOfCents(maxCents *int64) *Budget {
	if maxCents == nil {
		return nil
	}
	return &Budget{Type: "limit", MaxListCost: cents(*maxCents)}
}

// SnapshotEvent returns the body of a session.usage event: the session's
// cumulative usage and its budget at now.
func SnapshotEvent(s *db.Session, now time.Time) json.RawMessage {
	b, _ := json.Marshal(struct {
		Usage  Usage   `json:"usage"`
		Budget *Budget `json:"budget"`
	}{Of(s, now), BudgetOf(s)}) // plain structs: cannot fail
	return b
}

// ParseBudget parses the budget parameter of Sessions.New and Update:
// {"type":"limit","max_list_cost":{"amount":"<cents>","currency":"USD"}}.
// It returns the maximum in US cents. Errors are public messages.
func ParseBudget(raw json.RawMessage) (int64, error) {
	var b struct {
		Type        *string `json:"type"`
		MaxListCost *struct {
			Amount   *string `json:"amount"`
			Currency *string `json:"currency"`
		} `json:"max_list_cost"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return 0, fmt.Errorf("budget: must be an object {\"type\":\"limit\",\"max_list_cost\":{\"amount\",\"currency\"}}")
	}
	if b.Type != nil && *b.Type != "limit" {
		return 0, fmt.Errorf("budget.type: must be \"limit\", got %q", *b.Type)
	}
	if b.MaxListCost == nil {
		return 0, fmt.Errorf("budget.max_list_cost: is required")
	}
	if c := b.MaxListCost.Currency; c == nil || *c != "USD" {
		return 0, fmt.Errorf("budget.max_list_cost.currency: must be \"USD\"")
	}
	a := b.MaxListCost.Amount
	if a == nil {
		return 0, fmt.Errorf("budget.max_list_cost.amount: is required")
	}
	n, err := strconv.ParseInt(*a, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != *a || n > 1<<53 {
		return 0, fmt.Errorf("budget.max_list_cost.amount: must be a positive integer number of cents as a string without leading zeros (\"2500\" is $25.00), got %q", *a)
	}
	return n, nil
}
