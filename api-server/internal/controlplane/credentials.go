package controlplane

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// credentialServer serves the Credentials service: the tokens a session
// sends to its MCP servers, opened and refreshed here, in memory, and
// never logged.
type credentialServer struct {
	pb.UnimplementedCredentialsServer
	s     *Server
	creds *credentials.Service
}

// GetMCPCredential implements pb.CredentialsServer.
func (c *credentialServer) GetMCPCredential(ctx context.Context, req *pb.GetMCPCredentialRequest) (*pb.GetMCPCredentialResponse, error) {
	if err := requireFields("session_id", req.GetSessionId(), "mcp_server_url", req.GetMcpServerUrl()); err != nil {
		return nil, err
	}
	if n := len(req.GetStaleTokenSha256()); n != 0 && n != 32 {
		return nil, invalid("stale_token_sha256", "must be a SHA-256 (32 bytes)")
	}
	tok, err := c.creds.MCPToken(ctx, req.GetSessionId(), req.GetMcpServerUrl(), req.GetStaleTokenSha256())
	var authErr *credentials.AuthError
	switch {
	case errors.As(err, &authErr):
		// The reason names the credential and the endpoint's answer,
		// never a secret; the internal cause goes to the log.
		if authErr.Cause != nil {
			c.s.log.WarnContext(ctx, "controlplane: MCP credential refresh failed", "credential_id", authErr.CredentialID, "err", authErr.Cause)
		}
		return &pb.GetMCPCredentialResponse{Found: true, CredentialId: authErr.CredentialID, AuthFailure: authErr.Reason}, nil
	case errors.Is(err, db.ErrNotFound):
		return nil, status.Error(codes.NotFound, "get MCP credential: session not found")
	case err != nil:
		return nil, c.s.fail(ctx, "get MCP credential", err)
	case tok.CredentialID == "":
		return &pb.GetMCPCredentialResponse{CacheSeconds: int64(credentials.MaxCache / time.Second)}, nil
	}
	out := &pb.GetMCPCredentialResponse{Found: true, CredentialId: tok.CredentialID, Token: tok.Token,
		CacheSeconds: int64(tok.CacheFor / time.Second)}
	if tok.ExpiresAt != nil {
		out.ExpiresAt = timestamppb.New(*tok.ExpiresAt)
	}
	return out, nil
}
