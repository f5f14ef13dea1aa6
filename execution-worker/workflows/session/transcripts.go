package session

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// transcript is a session's transcript decoded: the conversation the
// model sees, the keys of its entries, their positions, and the anchor of
// the last request that recorded one (Index set).
type transcript struct {
	conv   []model.Message
	keys   []string
	seqs   []int64
	anchor *agentruntime.Anchor
	bytes  int64
}

// projection returns the conversation, keys and anchor for one turn, which
// may append to the slices and change the anchor without touching t.
// The messages themselves are shared: the runtime never modifies a
// message or block in place (it copies what it changes).
func (t *transcript) projection() ([]model.Message, []string, *agentruntime.Anchor) {
	var anchor *agentruntime.Anchor
	if t.anchor != nil {
		a := *t.anchor
		anchor = &a
	}
	return slices.Clip(t.conv), slices.Clip(t.keys), anchor
}

// extend returns t followed by entries, decoded; t is not modified.
func (t *transcript) extend(entries []*pb.TranscriptEntry) (*transcript, error) {
	n := len(t.conv)
	out := &transcript{
		conv:   append(slices.Clip(t.conv), make([]model.Message, 0, len(entries))...),
		keys:   append(slices.Clip(t.keys), make([]string, 0, len(entries))...),
		seqs:   append(slices.Clip(t.seqs), make([]int64, 0, len(entries))...),
		anchor: t.anchor,
		bytes:  t.bytes,
	}
	for i, e := range entries {
		var m transcriptBody
		if err := json.Unmarshal([]byte(e.GetBody()), &m); err != nil {
			return nil, fmt.Errorf("decode transcript entry %s: %w", e.GetKey(), err)
		}
		if m.Anchor != nil {
			m.Anchor.Index = n + i
			out.anchor = m.Anchor
		}
		out.conv = append(out.conv, m.Message)
		out.keys = append(out.keys, e.GetKey())
		out.seqs = append(out.seqs, e.GetSeq())
		// The decoded message weighs about twice its JSON.
		out.bytes += int64(len(e.GetKey())+2*len(e.GetBody())) + entryOverhead
	}
	return out, nil
}

// entryOverhead approximates what an entry costs beyond its key and body
// (headers of the message, its blocks and strings, the slice slots).
const entryOverhead = 160

// lastSeq is the position of the last entry, 0 when t is empty or its
// entries carry no positions (from a server that predates them).
func (t *transcript) lastSeq() int64 {
	if len(t.seqs) == 0 {
		return 0
	}
	return t.seqs[len(t.seqs)-1]
}

// ordered reports whether every entry has a position, in increasing
// order: only then can the entries after the last be fetched alone.
func (t *transcript) ordered() bool {
	var last int64
	for _, s := range t.seqs {
		if s <= last {
			return false
		}
		last = s
	}
	return true
}

// TranscriptCache keeps the decoded transcripts of the sessions this
// worker ran recently, so that a turn fetches only the entries appended
// since its session's last turn here (GetRunRequest.transcript_after_seq)
// and decodes only those, instead of fetching and decoding the whole
// transcript, which grows with every turn (measured: decoding it was half
// of the worker's CPU once sessions had 250 turns). A transcript only
// grows, and the api-server orders its entries in commit order, so what
// the cache holds is a prefix of the current one, whichever worker
// appended the rest. It is bounded in bytes; the least recently used
// sessions go first. A nil cache fetches and decodes the whole
// transcript every time.
type TranscriptCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	lru   *list.List // of *cached, most recent first
	index map[string]*list.Element
}

type cached struct {
	session string
	t       *transcript
}

// NewTranscriptCache returns a cache holding about maxBytes of decoded
// transcripts at most.
func NewTranscriptCache(maxBytes int64) *TranscriptCache {
	return &TranscriptCache{max: maxBytes, lru: list.New(), index: map[string]*list.Element{}}
}

// load loads the session's run through cp with its transcript decoded,
// fetching and decoding only the entries after those the cache holds,
// with its turn context. The run's Transcript holds what was fetched.
func (c *TranscriptCache) load(ctx context.Context, cp pb.ControlPlaneClient, sessionID string) (*pb.GetRunResponse, *transcript, error) {
	held := c.get(sessionID)
	after := held.lastSeq()
	run, err := cp.GetRun(ctx, &pb.GetRunRequest{SessionId: sessionID, TranscriptAfterSeq: after, WithTurnContext: true})
	if err != nil {
		c.forget(sessionID)
		return nil, nil, err
	}
	base := held
	if after == 0 || run.GetTranscriptAfterSeq() != after {
		base = &transcript{} // the whole transcript came
	}
	t, err := base.extend(run.GetTranscript())
	if err != nil {
		c.forget(sessionID)
		return nil, nil, err
	}
	c.put(sessionID, t)
	return run, t, nil
}

func (c *TranscriptCache) get(sessionID string) *transcript {
	if c == nil {
		return &transcript{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[sessionID]
	if !ok {
		return &transcript{}
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached).t
}

// put holds t as the session's transcript, unless it is empty, too large,
// or its entries carry no positions in order.
func (c *TranscriptCache) put(sessionID string, t *transcript) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(sessionID)
	if len(t.seqs) == 0 || t.bytes > c.max || !t.ordered() {
		return
	}
	c.index[sessionID] = c.lru.PushFront(&cached{session: sessionID, t: t})
	c.size += t.bytes
	for c.size > c.max {
		c.removeLocked(c.lru.Back().Value.(*cached).session)
	}
}

func (c *TranscriptCache) forget(sessionID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(sessionID)
}

func (c *TranscriptCache) removeLocked(sessionID string) {
	el, ok := c.index[sessionID]
	if !ok {
		return
	}
	c.size -= el.Value.(*cached).t.bytes
	c.lru.Remove(el)
	delete(c.index, sessionID)
}

// Len returns how many sessions' transcripts the cache holds, and about
// how many bytes they take.
func (c *TranscriptCache) Len() (sessions int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.size
}
