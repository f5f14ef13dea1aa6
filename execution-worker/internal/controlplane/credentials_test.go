package controlplane

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/mcp"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// credentialsStub answers GetMCPCredential from a function and counts calls.
type credentialsStub struct {
	calls  []*pb.GetMCPCredentialRequest
	answer func(*pb.GetMCPCredentialRequest) *pb.GetMCPCredentialResponse
}

func (s *credentialsStub) GetMCPCredential(_ context.Context, req *pb.GetMCPCredentialRequest, _ ...grpc.CallOption) (*pb.GetMCPCredentialResponse, error) {
	s.calls = append(s.calls, req)
	return s.answer(req), nil
}

// TestMCPCredentials: tokens are cached per session and server for the
// time the api-server allows; a stale token bypasses the cache and is
// sent as its SHA-256 only; an auth failure is mcp.ErrAuthFailed with the
// reason and drops the cached token.
func TestMCPCredentials(t *testing.T) {
	stub := &credentialsStub{answer: func(req *pb.GetMCPCredentialRequest) *pb.GetMCPCredentialResponse {
		if len(req.GetStaleTokenSha256()) > 0 {
			return &pb.GetMCPCredentialResponse{Found: true, CredentialId: "vcrd_1", AuthFailure: "refreshing the access token failed: the token endpoint answered 400 invalid_grant"}
		}
		return &pb.GetMCPCredentialResponse{Found: true, CredentialId: "vcrd_1", Token: "tok-" + req.GetSessionId(), CacheSeconds: 30}
	}}
	m := NewMCPCredentials(stub)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	for range 3 {
		if tok, err := m.Token(ctx, "sesn_a", "https://mcp.example.com/mcp", ""); err != nil || tok != "tok-sesn_a" {
			t.Fatalf("Token = %q, %v", tok, err)
		}
	}
	if tok, _ := m.Token(ctx, "sesn_b", "https://mcp.example.com/mcp", ""); tok != "tok-sesn_b" {
		t.Fatalf("second session's token = %q; want its own", tok)
	}
	if len(stub.calls) != 2 {
		t.Fatalf("calls = %d; want one per session while cached", len(stub.calls))
	}
	now = now.Add(31 * time.Second)
	_, _ = m.Token(ctx, "sesn_a", "https://mcp.example.com/mcp", "")
	if len(stub.calls) != 3 {
		t.Fatalf("calls = %d; want a new call after the cache time", len(stub.calls))
	}
	_, err := m.Token(ctx, "sesn_a", "https://mcp.example.com/mcp", "tok-sesn_a")
	if !errors.Is(err, mcp.ErrAuthFailed) || !strings.Contains(err.Error(), "invalid_grant") || strings.Contains(err.Error(), "tok-sesn_a") {
		t.Fatalf("stale token: err = %v; want ErrAuthFailed with the reason, without the token", err)
	}
	last := stub.calls[len(stub.calls)-1]
	if want := sha256.Sum256([]byte("tok-sesn_a")); string(last.GetStaleTokenSha256()) != string(want[:]) {
		t.Errorf("stale token sent as %x; want its SHA-256", last.GetStaleTokenSha256())
	}
	_, _ = m.Token(ctx, "sesn_a", "https://mcp.example.com/mcp", "")
	if len(stub.calls) != 5 {
		t.Errorf("calls = %d; want the failed credential asked again, not served from the cache", len(stub.calls))
	}
}
