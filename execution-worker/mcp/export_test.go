package mcp

import "time"

// SetClock makes the pool read the time from now.
func (p *Pool) SetClock(now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = now
}

// CloseIdle runs one idle sweep and reports how many sessions it closed.
func (p *Pool) CloseIdle() int { return p.closeIdle() }

// Sessions counts the pooled sessions.
func (p *Pool) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}
