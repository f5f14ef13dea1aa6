package agentruntime

import (
	"context"
	"encoding/json"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
)

// Coordinator runs the tools a multi-agent session's coordinator (its
// primary thread) is given to start, message and wait for its child
// threads. Its calls are idempotent by the tool use's event id: a retried
// turn runs a call again (the server answers what it did the first time)
// rather than reporting it ambiguous.
type Coordinator interface {
	// Definitions are the tools offered to the model.
	Definitions() []model.ToolDef
	// Has reports whether name is one of them.
	Has(name string) bool
	// Call runs the tool name with the model's input for the tool use
	// event useEventID. A call the model got wrong is an IsError result;
	// an error is a failure of the turn (it is retried).
	Call(ctx context.Context, useEventID, name string, input json.RawMessage) (tools.Result, error)
}

// runCoordinator handles tool use u of model message key with the run's
// Coordinator: the use is announced, the call made (or its journaled
// result taken), and its result event held for the next commit.
func (c *Core) runCoordinator(ctx context.Context, run *Run, key string, u model.Block, input json.RawMessage) (*tools.Result, error) {
	ev, _ := run.useEvent(key, u)
	useEventID, r, err := c.announce(ctx, run, ev)
	if err != nil {
		return nil, err
	}
	if r == nil {
		out, err := run.Coordinator.Call(ctx, useEventID, u.Name, input)
		if err != nil {
			return nil, err
		}
		stored, err := c.Store.RecordToolResult(context.WithoutCancel(ctx), useEventID, cutLarge(out))
		if err != nil {
			return nil, err
		}
		r = &stored
	}
	run.pending = append(run.pending, NewEvent{Key: key + "/tool_result/" + u.ID, Type: "agent.tool_result",
		Body: map[string]any{"tool_use_id": useEventID, "content": []textBlock{{Type: "text", Text: r.Content}}, "is_error": r.IsError}})
	return r, nil
}
