package db

import "context"

// InstallationID returns the id of this installation, created once by the
// migrations (00011_installation.sql). Workers label every sandbox
// resource with it, so installations sharing a Docker daemon, a sandbox
// root or a provider account never touch each other's sandboxes.
func (s *Store) InstallationID(ctx context.Context) (string, error) {
	id, err := s.q.InstallationGet(ctx)
	if err != nil {
		return "", mapErr("get installation id", err)
	}
	return id, nil
}
