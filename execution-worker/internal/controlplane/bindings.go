package controlplane

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Bindings implements sandbox.Bindings over the ControlPlane.
type Bindings struct {
	client pb.ControlPlaneClient
}

// NewBindings returns the ControlPlane-backed binding store.
func NewBindings(c pb.ControlPlaneClient) *Bindings { return &Bindings{client: c} }

func fromProto(b *pb.SandboxBinding) *sandbox.Binding {
	return &sandbox.Binding{SessionID: b.GetSessionId(), Provider: b.GetProvider(), ExternalID: b.GetExternalId(),
		SpecHash: b.GetSpecHash(), TaskQueue: b.GetTaskQueue()}
}

// GetBinding returns the session's binding or intent.
func (s *Bindings) GetBinding(ctx context.Context, sessionID string) (*sandbox.Binding, error) {
	resp, err := s.client.GetBinding(ctx, &pb.GetBindingRequest{SessionId: sessionID})
	if status.Code(err) == codes.NotFound || (err == nil && resp.GetBinding() == nil) {
		return nil, fmt.Errorf("session %s: %w", sessionID, sandbox.ErrNoBinding)
	}
	if err != nil {
		return nil, err
	}
	return fromProto(resp.GetBinding()), nil
}

// PutIntent stores a provisioning intent unless a binding exists.
func (s *Bindings) PutIntent(ctx context.Context, b sandbox.Binding) (*sandbox.Binding, error) {
	resp, err := s.client.PutProvisioningIntent(ctx, &pb.PutProvisioningIntentRequest{
		SessionId: b.SessionID, Provider: b.Provider, SpecHash: b.SpecHash, TaskQueue: b.TaskQueue})
	if err != nil {
		return nil, err
	}
	return fromProto(resp.GetBinding()), nil
}

// PutBinding replaces the intent with the binding.
func (s *Bindings) PutBinding(ctx context.Context, b sandbox.Binding) (*sandbox.Binding, error) {
	resp, err := s.client.PutBinding(ctx, &pb.PutBindingRequest{
		SessionId: b.SessionID, Provider: b.Provider, ExternalId: b.ExternalID, SpecHash: b.SpecHash, TaskQueue: b.TaskQueue})
	if err != nil {
		return nil, err
	}
	return fromProto(resp.GetBinding()), nil
}

// DeleteBinding removes the binding.
func (s *Bindings) DeleteBinding(ctx context.Context, sessionID string) error {
	_, err := s.client.DeleteBinding(ctx, &pb.DeleteBindingRequest{SessionId: sessionID})
	return err
}

var _ sandbox.Bindings = (*Bindings)(nil)

// FinalizeSessionDeletion asks the api-server to delete a fenced session
// whose sandbox is gone.
func (s *Bindings) FinalizeSessionDeletion(ctx context.Context, sessionID string) error {
	_, err := s.client.FinalizeSessionDeletion(ctx, &pb.FinalizeSessionDeletionRequest{SessionId: sessionID})
	return err
}

// ListBindings returns every binding and intent of a provider.
func (s *Bindings) ListBindings(ctx context.Context, provider string) ([]sandbox.Binding, error) {
	var out []sandbox.Binding
	after := ""
	for {
		resp, err := s.client.ListBindings(ctx, &pb.ListBindingsRequest{Provider: provider, AfterSessionId: after, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, b := range resp.GetBindings() {
			out = append(out, *fromProto(b))
		}
		if len(resp.GetBindings()) < 500 {
			return out, nil
		}
		after = resp.GetBindings()[len(resp.GetBindings())-1].GetSessionId()
	}
}
