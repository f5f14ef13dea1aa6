package app

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/model/modelfiles"
)

// fileOpener reads the files content blocks refer to through the
// ControlPlane, for modelfiles.
type fileOpener struct{ files *controlplane.Files }

// Open implements modelfiles.Opener.
func (o fileOpener) Open(ctx context.Context, sessionID, fileID string) (io.ReadCloser, modelfiles.Meta, error) {
	rc, meta, err := o.files.Open(ctx, sessionID, fileID)
	if status.Code(err) == codes.NotFound {
		return nil, modelfiles.Meta{}, fmt.Errorf("file %s: %w", fileID, modelfiles.ErrNotFound)
	}
	if err != nil {
		return nil, modelfiles.Meta{}, err
	}
	return rc, modelfiles.Meta{MediaType: meta.GetMediaType(), Size: meta.GetSizeBytes()}, nil
}
