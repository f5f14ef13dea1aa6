package agentruntime

import "time"

// Metrics receives the measurements of the agent loop (the worker's
// Prometheus metrics). Implementations must be safe for concurrent use
// and must not block: they are called on the turn's path.
type Metrics interface {
	// ModelFirstToken is the time from the start of a streamed request
	// to model to its first streamed event.
	ModelFirstToken(model string, took time.Duration)
	// ModelRequest is the duration of a request to model, failed or not.
	ModelRequest(model string, failed bool, took time.Duration)
	// ToolCall is the duration of a tool call: a built-in tool, run in a
	// sandbox of provider, or an MCP tool (tool and provider "mcp").
	ToolCall(tool, provider string, took time.Duration)
	// SandboxAcquire is how long a call waited for the session's sandbox
	// of provider; provisioned reports a sandbox created or re-attached
	// for the turn rather than the one the worker holds.
	SandboxAcquire(provider string, provisioned bool, took time.Duration)
}

// MCPMetricsLabel is the tool and provider under which MCP tool calls
// are measured (Metrics.ToolCall).
const MCPMetricsLabel = "mcp"

// noMetrics measures nothing (Core.Metrics nil).
type noMetrics struct{}

func (noMetrics) ModelFirstToken(string, time.Duration)      {}
func (noMetrics) ModelRequest(string, bool, time.Duration)   {}
func (noMetrics) ToolCall(string, string, time.Duration)     {}
func (noMetrics) SandboxAcquire(string, bool, time.Duration) {}

func (c *Core) metrics() Metrics {
	if c.Metrics == nil {
		return noMetrics{}
	}
	return c.Metrics
}
