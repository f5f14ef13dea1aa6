package sessionfiles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/sandbox"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// OutputStore is where outputs are published (the ControlPlane Files
// client).
type OutputStore interface {
	// ListOutputs lists the session's published outputs.
	ListOutputs(ctx context.Context, sessionID string) ([]*pb.Output, error)
	// Publish stores one output, streaming r.
	Publish(ctx context.Context, h *pb.PublishOutputHeader, r io.Reader) (*pb.PublishOutputResponse, error)
}

// Default output limits per session.
const (
	DefaultMaxOutputFiles = 100
	DefaultMaxOutputBytes = 1 << 30
)

// Publisher publishes a session's outputs.
type Publisher struct {
	// Store receives the outputs.
	Store OutputStore
	// MaxFiles and MaxBytes bound what one session publishes, in count
	// and total size (0: the defaults).
	MaxFiles int
	MaxBytes int64
}

// Report is what one Publish did.
type Report struct {
	// Published counts files published (new or changed) by this call.
	Published int
	// Bytes is the size of the files published by this call, in total.
	Bytes int64
	// Unchanged counts files already published as they are.
	Unchanged int
	// Skipped lists the paths left out because of the limits.
	Skipped []string
	// Limit describes the limit that was exceeded ("" when none was).
	Limit string
}

// Publish publishes every regular file under /mnt/session/outputs of sb
// that is new or changed since it was last published, in path order,
// within the limits. Files beyond a limit are reported in Skipped; the
// caller tells the client with a session.error.
func (p *Publisher) Publish(ctx context.Context, sessionID string, sb sandbox.Sandbox) (*Report, error) {
	ft, ok := sb.(sandbox.FileTransfer)
	if !ok {
		return &Report{}, nil
	}
	files, err := ft.ListFiles(ctx, sandbox.OutputsDir)
	if err != nil {
		return nil, fmt.Errorf("list outputs of session %s: %w", sessionID, err)
	}
	if len(files) == 0 {
		return &Report{}, nil
	}
	published, err := p.Store.ListOutputs(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list published outputs of session %s: %w", sessionID, err)
	}
	byPath := make(map[string]*pb.Output, len(published))
	for _, o := range published {
		byPath[o.GetPath()] = o
	}
	maxFiles, maxBytes := p.MaxFiles, p.MaxBytes
	if maxFiles <= 0 {
		maxFiles = DefaultMaxOutputFiles
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxOutputBytes
	}
	rep := &Report{}
	var count int
	var total int64
	for _, f := range files {
		if count+1 > maxFiles {
			rep.Skipped = append(rep.Skipped, f.Path)
			rep.Limit = fmt.Sprintf("a session publishes at most %d output files", maxFiles)
			continue
		}
		if total+f.Size > maxBytes {
			rep.Skipped = append(rep.Skipped, f.Path)
			rep.Limit = fmt.Sprintf("a session publishes at most %d bytes of outputs", maxBytes)
			continue
		}
		count++
		total += f.Size
		o := byPath[f.Path]
		if o != nil && unchanged(o, f) {
			rep.Unchanged++
			continue
		}
		sum := ""
		if o != nil && o.GetFile().GetSizeBytes() == f.Size {
			// Same size, and a modification time that cannot tell (too
			// close to the publication for the clocks' precision): compare
			// the content.
			if sum, err = fileSHA256(ctx, ft, f.Path); err != nil {
				return nil, err
			}
			if sum == o.GetFile().GetSha256() {
				rep.Unchanged++
				continue
			}
		}
		if err := p.publishOne(ctx, sessionID, ft, f, sum); err != nil {
			return nil, err
		}
		rep.Published++
		rep.Bytes += f.Size
	}
	return rep, nil
}

// mtimeMargin is how long after a file's modification time its
// publication must lie for the time to prove the file unchanged: some
// providers report whole seconds, and the sandbox's and the api-server's
// clocks may differ a little.
const mtimeMargin = 10 * time.Second

// unchanged reports whether a published output still matches the file
// without reading it: same size and modification time, and a publication
// well after that time (a file rewritten within the same second keeps
// both).
func unchanged(o *pb.Output, f sandbox.FileInfo) bool {
	if o.GetFile().GetSizeBytes() != f.Size || o.GetModifiedAt() == nil || f.ModTime.IsZero() {
		return false
	}
	return o.GetModifiedAt().AsTime().Equal(f.ModTime) && f.ModTime.Add(mtimeMargin).Before(o.GetFile().GetCreatedAt().AsTime())
}

// fileSHA256 hashes a sandbox file, streaming it.
func fileSHA256(ctx context.Context, ft sandbox.FileTransfer, path string) (string, error) {
	rc, _, err := ft.GetFile(ctx, path)
	if err != nil {
		return "", fmt.Errorf("read output %s: %w", path, err)
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("read output %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (p *Publisher) publishOne(ctx context.Context, sessionID string, ft sandbox.FileTransfer, f sandbox.FileInfo, sum string) error {
	rc, size, err := ft.GetFile(ctx, f.Path)
	if err != nil {
		return fmt.Errorf("read output %s: %w", f.Path, err)
	}
	defer func() { _ = rc.Close() }()
	name := f.Path[strings.LastIndexByte(f.Path, '/')+1:]
	h := &pb.PublishOutputHeader{SessionId: sessionID, Path: f.Path, SizeBytes: size, MediaType: mediaType(name), ModifiedAt: timestamp(f),
		Sha256: sum}
	if _, err := p.Store.Publish(ctx, h, rc); err != nil {
		return fmt.Errorf("publish output %s: %w", f.Path, err)
	}
	return nil
}

func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }
