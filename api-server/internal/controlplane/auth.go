package controlplane

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tokenAuth admits calls whose metadata carries
// "authorization: Bearer <worker token>".
type tokenAuth struct {
	token []byte
}

func newTokenAuth(token string, log *slog.Logger) *tokenAuth {
	if token == "" {
		log.Error("MANGO_WORKER_TOKEN is unset: the ControlPlane refuses every worker call")
	}
	return &tokenAuth{token: []byte(token)}
}

func (a *tokenAuth) check(ctx context.Context) error {
	if len(a.token) == 0 {
		return status.Error(codes.Unauthenticated, "worker token is not configured on the api-server")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "missing worker token: send authorization: Bearer <MANGO_WORKER_TOKEN>")
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), a.token) != 1 {
		return status.Error(codes.Unauthenticated, "invalid worker token")
	}
	return nil
}

func (a *tokenAuth) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *tokenAuth) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}
