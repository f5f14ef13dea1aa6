// Package modelfiles resolves file references in model requests. A client
// may send image and document blocks whose source is {"type":"file",
// "file_id":...}, naming a file of Mango's Files API; the upstream Messages
// API cannot know those ids. [Resolve] wraps a [model.Client] so that, before
// each request, such blocks are rewritten into base64 sources (and plain
// text documents into text sources) read through an [Opener].
//
// The transcript keeps the file reference: only the request sent to the
// model carries the bytes. Resolved sources are cached per session and file
// in a small LRU bounded by total bytes, since every round of a turn sends
// the whole conversation again.
package modelfiles

import (
	"bytes"
	"container/list"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/internal/sniff"
)

// Limits, the same as the api-server applies to base64 blocks.
const (
	// MaxImageBytes caps an image file.
	MaxImageBytes = 5 << 20
	// MaxDocumentBytes caps a document file.
	MaxDocumentBytes = 32 << 20
	// DefaultCacheBytes is the cache's default capacity: the total size of
	// the resolved sources it keeps.
	DefaultCacheBytes = 64 << 20
)

// ErrNotFound is the error (wrapped) an [Opener] returns for a file that does
// not exist or that the session may not read.
var ErrNotFound = errors.New("file not found")

// Meta describes an opened file.
type Meta struct {
	// MediaType is the media type the file was uploaded with ("" if
	// unknown). Images and PDFs are recognised by their content; it decides
	// only whether other documents count as plain text.
	MediaType string
	// Size is the length of the content in bytes, or -1 if unknown.
	Size int64
}

// Opener reads the files a session refers to.
//
// Open returns the content of fileID as sessionID may read it, and its
// metadata; the caller closes the reader. An unknown file, or one the
// session may not read, gives an error wrapping [ErrNotFound]; any other
// error is taken as transient (the request fails with it as is, and the
// caller retries). Files are immutable: the same id always has the same
// content, which is what makes caching safe. Open is safe for concurrent
// use.
type Opener interface {
	Open(ctx context.Context, sessionID, fileID string) (io.ReadCloser, Meta, error)
}

// OpenerFunc adapts a function to [Opener].
type OpenerFunc func(ctx context.Context, sessionID, fileID string) (io.ReadCloser, Meta, error)

// Open calls f.
func (f OpenerFunc) Open(ctx context.Context, sessionID, fileID string) (io.ReadCloser, Meta, error) {
	return f(ctx, sessionID, fileID)
}

type sessionKey struct{}

// WithSession returns ctx carrying the session on whose behalf model
// requests are made; [Resolve] reads files as that session.
func WithSession(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionID)
}

// SessionFrom returns the session set by [WithSession], or "".
func SessionFrom(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}

// Option configures [Resolve].
type Option func(*client)

// WithCacheBytes sets the cache capacity in bytes (0 disables the cache).
func WithCacheBytes(n int64) Option {
	return func(c *client) { c.cache.capacity = max(n, 0) }
}

// Resolve returns a client that rewrites the file sources of each request's
// image and document blocks (also inside tool_result content) into inline
// sources and then calls next. A request without file sources is passed
// on unchanged. A file that does not exist, is too large (images
// [MaxImageBytes], documents [MaxDocumentBytes]) or is of a kind the block
// cannot hold (an image that is not JPEG, PNG, GIF or WebP; a document
// that is neither PDF nor UTF-8 text/plain) fails the request with a
// non-retryable *model.Error (400 invalid_request_error) naming the block
// and the file. The session is the one ctx carries ([WithSession]).
func Resolve(next model.Client, open Opener, opts ...Option) model.Client {
	c := &client{next: next, open: open, cache: newCache(DefaultCacheBytes)}
	for _, o := range opts {
		o(c)
	}
	return c
}

type client struct {
	next  model.Client
	open  Opener
	cache *cache
}

// Create resolves req's file sources and calls next.Create.
func (c *client) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	r, err := c.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	return c.next.Create(ctx, r)
}

// Stream resolves req's file sources and calls next.Stream.
func (c *client) Stream(ctx context.Context, req *model.Request, onEvent func(model.StreamEvent)) (*model.Response, error) {
	r, err := c.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	return c.next.Stream(ctx, r, onEvent)
}

// resolve returns req, or a copy of it whose file sources are inline; the
// messages and blocks of req are never modified.
func (c *client) resolve(ctx context.Context, req *model.Request) (*model.Request, error) {
	if req == nil {
		return req, nil
	}
	var msgs []model.Message
	for i, m := range req.Messages {
		var content []model.Block
		for j := range m.Content {
			b := &m.Content[j]
			if !mayHoldFile(b) {
				continue // most blocks: no copy, no path
			}
			nb, changed, err := c.block(ctx, *b, fmt.Sprintf("messages[%d].content[%d]", i, j))
			if err != nil {
				return nil, err
			}
			if !changed {
				continue
			}
			if content == nil {
				content = append([]model.Block(nil), m.Content...)
			}
			content[j] = nb
		}
		if content == nil {
			continue
		}
		if msgs == nil {
			msgs = append([]model.Message(nil), req.Messages...)
		}
		msgs[i] = model.Message{Role: m.Role, Content: content}
	}
	if msgs == nil {
		return req, nil
	}
	out := *req
	out.Messages = msgs
	return &out, nil
}

// mayHoldFile reports whether b may have a file source for block to
// resolve: an image or document with its own members, or a tool_result
// whose content mentions one. A cheap test, made for every block of every
// request.
func mayHoldFile(b *model.Block) bool {
	switch b.Type {
	case "tool_result":
		return len(b.Raw) == 0 && bytes.Contains(b.Content, []byte(`"file"`))
	case "image", "document":
		return len(b.Raw) > 0
	}
	return false
}

// block resolves one block: an image or document with a file source, or a
// tool_result whose content holds such blocks.
func (c *client) block(ctx context.Context, b model.Block, path string) (model.Block, bool, error) {
	switch {
	case b.Type == "tool_result" && len(b.Raw) == 0:
		var inner []model.Block
		if !bytes.Contains(b.Content, []byte(`"file"`)) || json.Unmarshal(b.Content, &inner) != nil {
			return b, false, nil
		}
		changed := false
		for k, ib := range inner {
			nb, ch, err := c.block(ctx, ib, fmt.Sprintf("%s.content[%d]", path, k))
			if err != nil {
				return b, false, err
			}
			if ch {
				inner[k], changed = nb, true
			}
		}
		if !changed {
			return b, false, nil
		}
		content, err := json.Marshal(inner)
		if err != nil {
			return b, false, fmt.Errorf("encode tool_result content: %w", err)
		}
		b.Content = content
		return b, true, nil
	case (b.Type == "image" || b.Type == "document") && len(b.Raw) > 0:
		var members map[string]json.RawMessage
		if err := json.Unmarshal(b.Raw, &members); err != nil {
			return b, false, nil
		}
		var src struct {
			Type   string `json:"type"`
			FileID string `json:"file_id"`
		}
		if json.Unmarshal(members["source"], &src) != nil || src.Type != "file" {
			return b, false, nil
		}
		source, err := c.source(ctx, b.Type, src.FileID, path)
		var unusable *unusableError
		if errors.As(err, &unusable) {
			return placeholder(b.Type, src.FileID, unusable), true, nil
		}
		if err != nil {
			return b, false, err
		}
		members["source"] = source
		raw, err := json.Marshal(members)
		if err != nil {
			return b, false, fmt.Errorf("encode %s block: %w", b.Type, err)
		}
		return model.Block{Type: b.Type, Raw: raw}, true, nil
	}
	return b, false, nil
}

// source is the inline source of file fileID for a block of kind (image or
// document), from the cache or read through the Opener.
func (c *client) source(ctx context.Context, kind, fileID, path string) (json.RawMessage, error) {
	sid := SessionFrom(ctx)
	if sid == "" {
		return nil, fmt.Errorf("resolve file %s: no session in the request context (modelfiles.WithSession)", fileID)
	}
	key := sid + "\x00" + kind + "\x00" + fileID
	if src, ok := c.cache.get(key); ok {
		return src, nil
	}
	limit := int64(MaxImageBytes)
	if kind == "document" {
		limit = MaxDocumentBytes
	}
	rc, meta, err := c.open.Open(ctx, sid, fileID)
	if errors.Is(err, ErrNotFound) {
		return nil, refused(path, fileID, "was not found")
	}
	if err != nil {
		return nil, fmt.Errorf("open file %s: %w", fileID, err)
	}
	defer func() { _ = rc.Close() }()
	if meta.Size > limit {
		return nil, refused(path, fileID, fmt.Sprintf("is %d bytes, more than the %d allowed for %s", meta.Size, limit, article(kind)))
	}
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read file %s: %w", fileID, err)
	}
	if int64(len(data)) > limit {
		return nil, refused(path, fileID, fmt.Sprintf("is more than the %d bytes allowed for %s", limit, article(kind)))
	}
	src, err := inline(kind, data, meta.MediaType)
	if err != nil {
		return nil, refused(path, fileID, err.Error())
	}
	c.cache.put(key, src)
	return src, nil
}

// inline is the base64 (or text) source of data for a block of kind.
func inline(kind string, data []byte, mediaType string) (json.RawMessage, error) {
	sniffed := sniff.MediaType(data)
	type source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	var s source
	switch {
	case kind == "image" && sniff.Image(sniffed):
		s = source{Type: "base64", MediaType: sniffed, Data: base64.StdEncoding.EncodeToString(data)}
	case kind == "image":
		return nil, errors.New("is not a JPEG, PNG, GIF or WebP image")
	case sniffed == sniff.PDF:
		s = source{Type: "base64", MediaType: sniff.PDF, Data: base64.StdEncoding.EncodeToString(data)}
	case isPlainText(mediaType):
		if !utf8.Valid(data) {
			return nil, errors.New("is text/plain but not valid UTF-8")
		}
		if len(data) == 0 {
			return nil, errors.New("is empty")
		}
		s = source{Type: "text", MediaType: "text/plain", Data: string(data)}
	default:
		return nil, errors.New("is neither a PDF nor a text/plain document")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func isPlainText(mediaType string) bool {
	mt, _, err := mime.ParseMediaType(mediaType)
	return err == nil && mt == "text/plain"
}

func article(kind string) string {
	if kind == "image" {
		return "an image"
	}
	return "a " + kind
}

// unusableError reports a file a block names that cannot be sent: gone,
// too large or of the wrong kind. The block is replaced by a note to the
// model instead (the conversation keeps the reference, so failing the
// request would fail every later turn of the session too).
type unusableError struct{ msg string }

func (e *unusableError) Error() string { return e.msg }

func refused(path, fileID, what string) error {
	return &unusableError{msg: fmt.Sprintf("%s: file %s %s", path, fileID, what)}
}

// placeholder is the text block sent in place of an unusable file block.
func placeholder(kind, fileID string, err *unusableError) model.Block {
	_, reason, _ := strings.Cut(err.msg, "file "+fileID+" ")
	return model.Block{Type: "text", Text: fmt.Sprintf("[The %s %s the user attached could not be included: it %s.]", kind, fileID, reason)}
}

// cache is an LRU of resolved sources bounded by their total size.
type cache struct {
	mu       sync.Mutex
	capacity int64
	size     int64
	order    *list.List // of *entry, most recently used first
	byKey    map[string]*list.Element
}

type entry struct {
	key string
	src json.RawMessage
}

func newCache(capacity int64) *cache {
	return &cache{capacity: capacity, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *cache) get(key string) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry).src, true
}

// put stores src under key, evicting the least recently used entries to
// stay within capacity; a source larger than the capacity is not kept.
func (c *cache) put(key string, src json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(len(src))
	if n > c.capacity {
		return
	}
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&entry{key: key, src: src})
	c.size += n
	for c.size > c.capacity {
		el := c.order.Back()
		e := el.Value.(*entry)
		c.order.Remove(el)
		delete(c.byKey, e.key)
		c.size -= int64(len(e.src))
	}
}

// stats reports the cache's entry count and total size (for tests).
func (c *cache) stats() (entries int, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.size
}

var _ model.Client = (*client)(nil)
