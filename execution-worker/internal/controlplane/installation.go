package controlplane

import (
	"context"
	"fmt"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Installation returns the id of the installation the api-server belongs
// to, which the worker's sandbox provider labels everything with. The
// call is retried like any other while the api-server is unavailable
// (when the client was dialled with [RetryUnavailable]).
func Installation(ctx context.Context, c pb.ControlPlaneClient) (string, error) {
	resp, err := c.GetInstallation(ctx, &pb.GetInstallationRequest{})
	if err != nil {
		return "", fmt.Errorf("get the installation id: %w", err)
	}
	id := resp.GetInstallationId()
	if err := sandbox.ValidateInstallation(id); err != nil {
		return "", fmt.Errorf("the ControlPlane answered an unusable installation id: %w", err)
	}
	return id, nil
}
