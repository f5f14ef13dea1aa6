package session

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// publishOutputs publishes the outputs of a turn that used its sandbox,
// before the turn's ending is committed, so a client that sees the session
// idle finds them listed. Outputs beyond the limits are not published: the
// session.error that says which and why is returned, for the caller to
// commit before the turn's ending (nil: nothing to say).
func (a *TurnActivities) publishOutputs(ctx context.Context, sid, turnKey string, sb sandbox.Sandbox) (*pb.NewEvent, error) {
	if a.Outputs == nil || sb == nil {
		return nil, nil
	}
	rep, err := a.publish(ctx, sid, sb)
	if err != nil {
		return nil, err
	}
	if len(rep.Skipped) == 0 {
		return nil, nil
	}
	shown := rep.Skipped
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if n := len(rep.Skipped) - len(shown); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	msg := fmt.Sprintf("%d output files were not published: %s (%s%s)", len(rep.Skipped), rep.Limit, strings.Join(shown, ", "), more)
	return errorEvent(turnKey+"/outputs_limit", "unknown_error", msg, retryExhausted), nil
}

// publish publishes the outputs of sb in a files.publish_outputs span,
// which counts the files published and their bytes.
func (a *TurnActivities) publish(ctx context.Context, sid string, sb sandbox.Sandbox) (*sessionfiles.Report, error) {
	ctx, span := a.startSpan(ctx, "files.publish_outputs")
	rep, err := a.Outputs.Publish(ctx, sid, sb)
	if err == nil {
		span.SetAttributes(attribute.Int("mango.files.count", rep.Published), attribute.Int64("mango.files.bytes", rep.Bytes))
	}
	endSpan(span, err, "outputs not published")
	return rep, err
}
