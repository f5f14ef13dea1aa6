package session

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// runServer answers GetRun from an append-only transcript, as the
// api-server does: the entries after the requested position, or all of
// them when it predates positions (legacy).
type runServer struct {
	pb.ControlPlaneClient
	entries []*pb.TranscriptEntry
	legacy  bool
	gone    bool
	asked   []int64 // the transcript_after_seq of each request
	sent    int     // entries sent over all requests
}

func (s *runServer) append(keys ...string) {
	for _, k := range keys {
		seq := int64(len(s.entries)+1) * 10 // positions need not be dense
		if s.legacy {
			seq = 0
		}
		body := `{"role":"user","content":[{"type":"text","text":"` + k + `"}]}`
		if strings.HasSuffix(k, "/1") {
			body = `{"role":"assistant","content":[{"type":"text","text":"` + k + `"}],"mango_anchor":{"prompt_tokens":7}}`
		}
		s.entries = append(s.entries, &pb.TranscriptEntry{Key: k, Body: body, Seq: seq})
	}
}

func (s *runServer) GetRun(_ context.Context, req *pb.GetRunRequest, _ ...grpc.CallOption) (*pb.GetRunResponse, error) {
	s.asked = append(s.asked, req.GetTranscriptAfterSeq())
	if s.gone {
		return nil, status.Error(codes.NotFound, "session not found")
	}
	resp := &pb.GetRunResponse{SessionId: req.GetSessionId()}
	after := req.GetTranscriptAfterSeq()
	if s.legacy {
		after = 0
	}
	resp.TranscriptAfterSeq = after
	for _, e := range s.entries {
		if e.GetSeq() > after || s.legacy {
			resp.Transcript = append(resp.Transcript, &pb.TranscriptEntry{Key: e.GetKey(), Body: e.GetBody(), Seq: e.GetSeq()})
		}
	}
	s.sent += len(resp.Transcript)
	return resp, nil
}

// keysOf is the keys of t, checked against its conversation (each
// message's text is its key).
func keysOf(t *testing.T, tr *transcript) string {
	t.Helper()
	conv, keys, _ := tr.projection()
	for i, m := range conv {
		if len(m.Content) != 1 || m.Content[0].Text != keys[i] {
			t.Fatalf("message %d = %+v; want the text %q", i, m, keys[i])
		}
	}
	return strings.Join(keys, " ")
}

func TestTranscriptCacheFetchesOnlyWhatIsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := &runServer{}
	c := NewTranscriptCache(1 << 20)
	srv.append("t1/0", "t1/1")
	for turn, want := range []string{"t1/0 t1/1", "t1/0 t1/1 t2/0 t2/1 t2/2", "t1/0 t1/1 t2/0 t2/1 t2/2", "t1/0 t1/1 t2/0 t2/1 t2/2 t4/0"} {
		_, tr, err := c.load(ctx, srv, "sesn_a")
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(t, tr); got != want {
			t.Fatalf("turn %d: transcript %q, want %q", turn+1, got, want)
		}
		// The anchor is the last assistant message's (keys ending in /1),
		// at its index.
		_, keys, anchor := tr.projection()
		last := -1
		for i, k := range keys {
			if strings.HasSuffix(k, "/1") {
				last = i
			}
		}
		if anchor == nil || anchor.Index != last || anchor.PromptTokens != 7 {
			t.Fatalf("turn %d: anchor %+v; want the one of message %d", turn+1, anchor, last)
		}
		// What a turn appends to its projection stays out of the cache.
		conv, keys, anchor := tr.projection()
		_ = append(conv, conv[0])
		_ = append(keys, "scratch")
		anchor.Index = -1
		if _, _, again := c.get("sesn_a").projection(); again.Index == -1 || keysOf(t, c.get("sesn_a")) != want {
			t.Fatalf("turn %d: a turn's changes to its projection reached the cache", turn+1)
		}
		// Entries appended between turns, by this worker or another.
		switch turn {
		case 0:
			srv.append("t2/0", "t2/1", "t2/2")
		case 2:
			srv.append("t4/0")
		}
	}
	if want := []int64{0, 20, 50, 50}; fmt.Sprint(srv.asked) != fmt.Sprint(want) {
		t.Errorf("asked after %v, want %v", srv.asked, want)
	}
	if srv.sent != 6 {
		t.Errorf("entries sent = %d, want 6 (each once)", srv.sent)
	}
}

// TestTranscriptCacheWithLegacyServer: a server that ignores the position
// (and sets none) sends the whole transcript each time; the cache neither
// duplicates entries nor keeps them.
func TestTranscriptCacheWithLegacyServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := &runServer{legacy: true}
	c := NewTranscriptCache(1 << 20)
	srv.append("a", "b")
	for range 2 {
		_, tr, err := c.load(ctx, srv, "sesn_a")
		if err != nil || keysOf(t, tr) != "a b" {
			t.Fatalf("load = %v; want a b", err)
		}
	}
	if n, _ := c.Len(); n != 0 || fmt.Sprint(srv.asked) != "[0 0]" {
		t.Errorf("cache holds %d sessions, asked after %v; want none held and every fetch whole", n, srv.asked)
	}
}

func TestTranscriptCacheEvictsAndForgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := map[string]*runServer{}
	// Each transcript is 10 entries of ~280 bytes (key, twice the body,
	// overhead); 3 fit in 9 KB.
	c := NewTranscriptCache(9 << 10)
	for i := range 5 {
		id := fmt.Sprintf("sesn_%d", i)
		srv := &runServer{}
		for j := range 10 {
			srv.append(fmt.Sprintf("m%d", j))
		}
		servers[id] = srv
		if _, _, err := c.load(ctx, srv, id); err != nil {
			t.Fatal(err)
		}
	}
	n, bytes := c.Len()
	if n != 3 || bytes > 9<<10 {
		t.Fatalf("cache holds %d sessions, %d bytes; want the 3 most recent within 9 KiB", n, bytes)
	}
	// The oldest was evicted: fetched whole again; a recent one is not.
	if _, _, err := c.load(ctx, servers["sesn_0"], "sesn_0"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.load(ctx, servers["sesn_4"], "sesn_4"); err != nil {
		t.Fatal(err)
	}
	if a0, a4 := servers["sesn_0"].asked, servers["sesn_4"].asked; a0[len(a0)-1] != 0 || a4[len(a4)-1] != 100 {
		t.Errorf("asked after %v (evicted) and %v (held); want 0 and 100", a0, a4)
	}
	// A deleted session is dropped.
	servers["sesn_4"].gone = true
	if _, _, err := c.load(ctx, servers["sesn_4"], "sesn_4"); status.Code(err) != codes.NotFound {
		t.Fatalf("load of a deleted session = %v, want NotFound", err)
	}
	if n2, _ := c.Len(); n2 != n-1 {
		t.Errorf("cache holds %d sessions after a deletion, want %d", n2, n-1)
	}
	// A nil cache fetches everything.
	var none *TranscriptCache
	_, tr, err := none.load(ctx, servers["sesn_1"], "sesn_1")
	if err != nil || len(tr.keys) != 10 || servers["sesn_1"].asked[len(servers["sesn_1"].asked)-1] != 0 {
		t.Errorf("nil cache: %d entries, %v; want all 10 fetched whole", len(tr.keys), err)
	}
}
