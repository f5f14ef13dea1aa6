package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// readSkill reads a skill resource's archive through ReadSkillVersion: the
// bytes, the size of the first message and the messages' count.
func readSkill(ctx context.Context, c pb.SessionResourcesClient, sid, rid string) ([]byte, int64, int, error) {
	stream, err := c.ReadSkillVersion(ctx, &pb.ReadSkillVersionRequest{SessionId: sid, ResourceId: rid})
	if err != nil {
		return nil, 0, 0, err
	}
	var out []byte
	var size int64
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, size, i, nil
		}
		if err != nil {
			return nil, 0, i, err
		}
		if i == 0 {
			size = msg.GetSizeBytes()
		}
		out = append(out, msg.GetData()...)
	}
}

// TestSkillResources: a session's skill resources reach workers with the
// skill's id, version, name and description (ListSessionResources and the
// turn context), and ReadSkillVersion streams the version's archive;
// NOT_FOUND for a resource that is not a skill of the session, and once
// the version is deleted.
func TestSkillResources(t *testing.T) {
	t.Parallel()
	e := &env{store: dbtest.Store(t), reg: prometheus.NewRegistry(), clock: newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	blobs := filestore.Postgres(e.store)
	conn := dial(t, controlplane.Deps{Store: e.store, Token: token, Registry: e.reg, Now: e.clock.now, Files: blobs})
	e.client = pb.NewControlPlaneClient(conn)
	res := pb.NewSessionResourcesClient(conn)
	ctx := authed(context.Background())
	archive := pattern(controlplane.ReadChunkBytes + 5) // two messages
	for i, key := range []string{"skills/k1", "skills/k2"} {
		if _, err := blobs.Put(ctx, key, bytes.NewReader(archive[:len(archive)-i]), int64(len(archive))); err != nil {
			t.Fatal(err)
		}
	}
	now := e.clock.now()
	sk := &db.Skill{ID: "skill_cp", Name: "csv-tools", DisplayName: "CSV", CreatedAt: now}
	if err := e.store.SkillCreate(ctx, sk, &db.SkillVersion{ID: "skillver_cp1", Name: "csv-tools", Description: "Summarise CSV files.",
		StorageKey: "skills/k1", SizeBytes: int64(len(archive)), FileCount: 2, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SkillVersionCreate(ctx, &db.SkillVersion{ID: "skillver_cp2", SkillID: "skill_cp", Name: "csv-tools",
		Description: "v2", StorageKey: "skills/k2", SizeBytes: int64(len(archive) - 1), FileCount: 2, CreatedAt: now.Add(1)}); err != nil {
		t.Fatal(err)
	}
	sid := ids.New(ids.Session)
	if _, _, err := e.store.SessionCreate(ctx, db.SessionCreateParams{ID: sid, AgentID: ids.New(ids.Agent), AgentVersion: 1,
		Provider: "local", Now: now, Agent: json.RawMessage(`{"name":"a","model":{"id":"m"}}`),
		Resources: []db.ResourceCreate{{ID: "sesrsc_repo", Type: db.ResourceRepository, MountPath: "/workspace/r", URL: "https://example.com/r.git"}},
		Skills:    []db.SessionSkill{{ResourceID: "sesrsc_skill", SkillID: "skill_cp", VersionID: "skillver_cp1", Name: "csv-tools"}}}, nil); err != nil {
		t.Fatal(err)
	}

	list, err := res.ListSessionResources(ctx, &pb.ListSessionResourcesRequest{SessionId: sid})
	if err != nil || len(list.GetResources()) != 2 {
		t.Fatalf("list = %v, %v; want the repository and the skill", list, err)
	}
	checkSkillPB(t, "ListSessionResources", list.GetResources()[1])
	run, err := e.client.GetRun(ctx, &pb.GetRunRequest{SessionId: sid, WithTurnContext: true})
	if err != nil || len(run.GetTurnContext().GetResources()) != 2 {
		t.Fatalf("turn context = %v, %v; want two resources", run.GetTurnContext(), err)
	}
	checkSkillPB(t, "turn context", run.GetTurnContext().GetResources()[1])

	got, size, msgs, err := readSkill(ctx, res, sid, "sesrsc_skill")
	if err != nil || !bytes.Equal(got, archive) || size != int64(len(archive)) || msgs != 2 {
		t.Fatalf("read skill = %d bytes (size %d, %d messages), %v; want the %d bytes of skillver_cp1 in 2 messages",
			len(got), size, msgs, err, len(archive))
	}
	for what, rid := range map[string]string{"a repository": "sesrsc_repo", "an unknown resource": "sesrsc_none"} {
		_, _, _, err := readSkill(ctx, res, sid, rid)
		wantCode(t, "read skill of "+what, err, codes.NotFound)
	}
	_, _, _, err = readSkill(ctx, res, ids.New(ids.Session), "sesrsc_skill")
	wantCode(t, "read skill of another session", err, codes.NotFound)
	_, _, _, err = readSkill(ctx, res, sid, "")
	wantCode(t, "read skill without resource_id", err, codes.InvalidArgument)

	if _, err := e.store.SkillVersionDelete(ctx, "skill_cp", "skillver_cp1", now); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = readSkill(ctx, res, sid, "sesrsc_skill")
	wantCode(t, "read skill of a deleted version", err, codes.NotFound)
}

func checkSkillPB(t *testing.T, where string, r *pb.SessionResource) {
	t.Helper()
	if r.GetId() != "sesrsc_skill" || r.GetType() != "skill" || r.GetMountPath() != "/mnt/session/skills/csv-tools" ||
		r.GetSkillId() != "skill_cp" || r.GetSkillVersionId() != "skillver_cp1" || r.GetSkillName() != "csv-tools" ||
		r.GetSkillDescription() != "Summarise CSV files." {
		t.Fatalf("%s: skill resource = %v; want skill_cp/skillver_cp1 (csv-tools) at /mnt/session/skills/csv-tools", where, r)
	}
}
