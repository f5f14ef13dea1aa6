package agentruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mangohq/mango/execution-worker/mcp"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
)

// MCPClient reaches remote MCP servers (by URL) on behalf of a Mango
// session, whose credentials it presents. Failures to authenticate wrap
// mcp.ErrAuthFailed.
type MCPClient interface {
	ListTools(ctx context.Context, sessionID, url string) ([]mcp.Tool, error)
	CallTool(ctx context.Context, sessionID, url, tool string, arguments json.RawMessage) (*mcp.CallResult, error)
}

// mcpErrorBody is the body of a session.error about an MCP server:
// mcp_connection_failed_error or, when authentication failed,
// mcp_authentication_failed_error.
func mcpErrorBody(server string, err error, message string) map[string]any {
	typ := "mcp_connection_failed_error"
	if errors.Is(err, mcp.ErrAuthFailed) {
		typ = "mcp_authentication_failed_error"
	}
	return map[string]any{"error": map[string]any{"type": typ, "mcp_server_name": server,
		"retry_status": map[string]string{"type": "exhausted"}, "message": message}}
}

// mcpTool is an MCP tool offered to the model.
type mcpTool struct {
	server, url, name string
	setting           ToolSetting
	def               model.ToolDef
}

// mcpCatalog holds a run's MCP tools by model-facing name, in order.
type mcpCatalog struct {
	byName map[string]*mcpTool
	order  []string
}

// validToolName is what the Messages API accepts as a tool name.
var validToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// mcpToolName is the model-facing name of an MCP tool.
func mcpToolName(server, tool string) string { return "mcp__" + server + "__" + tool }

// mcpToolsKey is the tool-journal key under which a session pins the tool
// list of one MCP server: discovered once, then the same for every turn.
func mcpToolsKey(server string) string { return "mcp/" + server + "/tools" }

// mcpCatalog discovers (or reads the pinned) tools of the agent's MCP
// toolsets. A server that cannot be reached is reported with a
// session.error (mcp_connection_failed_error, or
// mcp_authentication_failed_error when it refused the session's
// credentials) and left out of this turn; nothing is pinned for it, so a
// later turn tries again.
func (c *Core) mcpCatalog(ctx context.Context, run *Run) (*mcpCatalog, error) {
	cat := &mcpCatalog{byName: map[string]*mcpTool{}}
	if run.Tools == nil || len(run.Tools.MCP) == 0 {
		return cat, nil
	}
	urls := map[string]string{}
	for _, s := range run.Agent.MCPServers {
		urls[s.Name] = s.URL
	}
	for _, ts := range run.Tools.MCP {
		url := urls[ts.Server]
		if url == "" || c.MCP == nil {
			continue
		}
		list, err := c.pinnedTools(ctx, run.SessionID, ts.Server, url)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			// The turn goes on without the server's tools: not a retry.
			what := "could not be reached"
			if errors.Is(err, mcp.ErrAuthFailed) {
				what = "refused the session's credentials"
			}
			body := mcpErrorBody(ts.Server, err, fmt.Sprintf("MCP server %q (%s) %s; its tools are not available in this turn: %v", ts.Server, url, what, err))
			if _, aerr := c.Store.AppendEvents(ctx, []NewEvent{{Key: run.TurnKey + "/mcp_failed/" + ts.Server, Type: "session.error", Body: body}}); aerr != nil {
				return nil, aerr
			}
			continue
		}
		for _, t := range list {
			st := ts.Setting(t.Name)
			name := mcpToolName(ts.Server, t.Name)
			if !st.Enabled || !validToolName.MatchString(name) {
				continue
			}
			schema := t.InputSchema
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			cat.byName[name] = &mcpTool{server: ts.Server, url: url, name: t.Name, setting: st,
				def: model.ToolDef{Name: name, Description: t.Description, InputSchema: schema}}
			cat.order = append(cat.order, name)
		}
	}
	return cat, nil
}

// pinnedTools returns the session's pinned tool list of a server,
// discovering and pinning it on first use (first write wins).
func (c *Core) pinnedTools(ctx context.Context, sessionID, server, url string) ([]mcp.Tool, error) {
	key := mcpToolsKey(server)
	r, ok, err := c.Store.ToolResult(ctx, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		list, err := c.MCP.ListTools(ctx, sessionID, url)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(list)
		if err != nil {
			return nil, err
		}
		stored, err := c.Store.RecordToolResult(ctx, key, tools.Result{Content: string(data)})
		if err != nil {
			return nil, err
		}
		r = &stored
	}
	var list []mcp.Tool
	if err := json.Unmarshal([]byte(r.Content), &list); err != nil {
		return nil, fmt.Errorf("decode pinned tools of MCP server %q: %w", server, err)
	}
	return list, nil
}

// callMCP runs an MCP tool (its agent.mcp_tool_use is useEventID) and
// converts its result. Text blocks are kept; other blocks are described
// (the model gets text). A failed call is the tool's error result; an
// authentication failure is also reported with a session.error
// (mcp_authentication_failed_error), once per tool use.
func (c *Core) callMCP(ctx context.Context, run *Run, t *mcpTool, useEventID string, input json.RawMessage) (tools.Result, error) {
	res, err := c.MCP.CallTool(ctx, run.SessionID, t.url, t.name, input)
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, err
		}
		if errors.Is(err, mcp.ErrAuthFailed) {
			body := mcpErrorBody(t.server, err, fmt.Sprintf("MCP server %q (%s) refused the session's credentials; the call of %s failed: %v", t.server, t.url, t.name, err))
			key := run.TurnKey + "/mcp_auth_failed/" + t.server + "/" + useEventID
			if _, aerr := c.Store.AppendEvents(ctx, []NewEvent{{Key: key, Type: "session.error", Body: body}}); aerr != nil {
				return tools.Result{}, aerr
			}
		}
		// The server answered with an error or could not be reached: the
		// model sees it as the tool's error.
		return tools.Result{IsError: true, Content: fmt.Sprintf("MCP server %q: %v", t.server, err)}, nil
	}
	var b strings.Builder
	for i, blk := range res.Content {
		if i > 0 {
			b.WriteString("\n")
		}
		switch blk.Type {
		case "text":
			b.WriteString(blk.Text)
		case "resource":
			b.Write(blk.Resource)
		default:
			fmt.Fprintf(&b, "[%s content (%s) omitted]", blk.Type, blk.MimeType)
		}
	}
	return tools.Result{Content: b.String(), IsError: res.IsError}, nil
}
