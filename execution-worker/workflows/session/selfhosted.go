package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/tools"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// DefaultSelfHostedToolTimeout is how long the client's worker of a
// self-hosted environment has to answer a built-in tool call when
// TurnActivities.SelfHostedToolTimeout is not set.
const DefaultSelfHostedToolTimeout = 120 * time.Second

// awaitMaxWait is how long one AwaitToolResult call may be held by the
// api-server before it answers "not yet" and the worker calls again.
const awaitMaxWait = 30 * time.Second

// errSelfHosted refuses what would need a sandbox in a session of a
// self-hosted environment, which has none: its built-in tools run on the
// client's worker.
var errSelfHosted = errors.New("the session's environment is self_hosted: it has no Mango sandbox (its built-in tools run on the client's environment worker)")

// selfHostedEnvironment reports whether an environment's resolved
// configuration (JSON; empty: the session has no environment) is of type
// self_hosted.
func selfHostedEnvironment(environment string) (bool, error) {
	if environment == "" {
		return false, nil
	}
	var cfg struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(environment), &cfg); err != nil {
		return false, fmt.Errorf("decode environment configuration: %w", err)
	}
	return cfg.Type == "self_hosted", nil
}

// noSandbox is a self-hosted session's sandbox acquisition: it fails,
// naming why.
func noSandbox(context.Context) (sandbox.Sandbox, error) { return nil, errSelfHosted }

// rpcToolResults is agentruntime.ToolResults over the ControlPlane's
// AwaitToolResult: the answers of one self-hosted session's built-in tool
// calls, which the api-server holds until the client's worker posts them
// (or the timeout passes and it records an error result).
type rpcToolResults struct {
	cp        pb.ControlPlaneClient
	sessionID string
	// timeout is how long the client's worker has to answer, from the
	// tool_use event's creation.
	timeout time.Duration
	// maxWait bounds one call; the worker calls again until answered.
	maxWait time.Duration
}

var _ agentruntime.ToolResults = (*rpcToolResults)(nil)

// Await implements agentruntime.ToolResults: it calls AwaitToolResult
// until the answer exists or ctx ends.
func (r *rpcToolResults) Await(ctx context.Context, useEventID string) (tools.Result, error) {
	req := &pb.AwaitToolResultRequest{SessionId: r.sessionID, ToolUseEventId: useEventID,
		Timeout: durationpb.New(r.timeout), MaxWait: durationpb.New(r.maxWait)}
	for {
		start := time.Now()
		resp, err := r.cp.AwaitToolResult(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				// Interrupted, or the attempt given up: say so, not how
				// the call ended.
				err = ctx.Err()
			}
			return tools.Result{}, fmt.Errorf("await the result of tool use %s: %w", useEventID, err)
		}
		if resp.GetResolved() {
			res, err := agentruntime.ContentResult(json.RawMessage(resp.GetContent()), resp.GetIsError())
			if err != nil {
				return tools.Result{}, fmt.Errorf("result %s of tool use %s: %w", resp.GetAnswerEventId(), useEventID, err)
			}
			return res, nil
		}
		if err := pauseIfEarly(ctx, time.Since(start), r.maxWait); err != nil {
			return tools.Result{}, err
		}
	}
}

// awaitRetryPause spaces AwaitToolResult calls answered "not yet" well
// before their max wait (a draining api-server answers at once).
const awaitRetryPause = time.Second

// pauseIfEarly waits awaitRetryPause when a call answered "not yet" after
// took, less than half its maxWait; it returns ctx's error when ctx ends.
func pauseIfEarly(ctx context.Context, took, maxWait time.Duration) error {
	if took >= maxWait/2 {
		return ctx.Err()
	}
	timer := time.NewTimer(awaitRetryPause)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
