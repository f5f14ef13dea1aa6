package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/model"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func TestSelfHostedEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config string
		want   bool
		err    bool
	}{
		{"", false, false},
		{`{"type":"cloud","networking":{"type":"unrestricted"}}`, false, false},
		{`{"type":"self_hosted"}`, true, false},
		{`{`, false, true},
	} {
		got, err := selfHostedEnvironment(tc.config)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("selfHostedEnvironment(%q) = %v, %v; want %v, error %v", tc.config, got, err, tc.want, tc.err)
		}
	}
}

// blockingCP holds AwaitToolResult until its context ends, announcing the
// call, and answers as gRPC does then.
type blockingCP struct {
	pb.ControlPlaneClient
	called chan struct{}
}

func (b *blockingCP) AwaitToolResult(ctx context.Context, _ *pb.AwaitToolResultRequest, _ ...grpc.CallOption) (*pb.AwaitToolResultResponse, error) {
	close(b.called)
	<-ctx.Done()
	return nil, status.Error(codes.Canceled, "context canceled")
}

// TestAwaitInterrupted: a turn interrupted while its call is held gets
// the context's error, not the transport's.
func TestAwaitInterrupted(t *testing.T) {
	t.Parallel()
	cp := &blockingCP{called: make(chan struct{})}
	r := &rpcToolResults{cp: cp, sessionID: "sesn_1", timeout: time.Minute, maxWait: time.Minute}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.Await(ctx, "sevt_1")
		done <- err
	}()
	<-cp.called
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Await interrupted = %v, want context.Canceled", err)
	}
}

// answerCP answers AwaitToolResult with an image result.
type answerCP struct{ pb.ControlPlaneClient }

func (answerCP) AwaitToolResult(context.Context, *pb.AwaitToolResultRequest, ...grpc.CallOption) (*pb.AwaitToolResultResponse, error) {
	return &pb.AwaitToolResultResponse{Resolved: true, IsError: true, AnswerEventId: "sevt_2",
		Content: `[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]`}, nil
}

// TestAwaitAnswerBlocks: an answer's content becomes the tool result:
// text joined, other blocks kept for the model, is_error kept.
func TestAwaitAnswerBlocks(t *testing.T) {
	t.Parallel()
	r := &rpcToolResults{cp: answerCP{}, sessionID: "sesn_1", timeout: time.Minute, maxWait: time.Minute}
	res, err := r.Await(t.Context(), "sevt_1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "see" || !res.IsError || len(res.Blocks) == 0 {
		t.Errorf("Await = %+v, want text see, is_error and the blocks", res)
	}
}

func TestUnansweredResults(t *testing.T) {
	t.Parallel()
	user := model.Message{Role: "user", Content: []model.Block{{Type: "text", Text: "hi"}}}
	calls := model.Message{Role: "assistant", Content: []model.Block{{Type: "text", Text: "running two"},
		{Type: "tool_use", ID: "toolu_1", Name: "bash"}, {Type: "tool_use", ID: "toolu_2", Name: "read"}}}
	reply := model.Message{Role: "assistant", Content: []model.Block{{Type: "text", Text: "done"}}}
	for _, tc := range []struct {
		name string
		conv []model.Message
		want []string
	}{
		{"empty conversation", nil, nil},
		{"ends with the user", []model.Message{user}, nil},
		{"ends with a reply", []model.Message{user, reply}, nil},
		{"ends with tool uses", []model.Message{user, calls}, []string{"toolu_1", "toolu_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unansweredResults(tc.conv)
			var ids []string
			for _, b := range got {
				if b.Type != "tool_result" || !b.IsError || !strings.Contains(string(b.Content), "may or may not have run") {
					t.Errorf("block %+v: want an error tool_result saying the call may or may not have run", b)
				}
				ids = append(ids, b.ToolUseID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("results answer %v, want %v", ids, tc.want)
			}
		})
	}
}
