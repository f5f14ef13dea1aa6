package eventspec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/mangohq/mango/api-server/internal/jsonx"
	"github.com/mangohq/mango/internal/sniff"
)

// Content limits.
const (
	// MaxImageBytes caps the decoded data of a base64 image block.
	MaxImageBytes = 5 << 20
	// MaxDocumentBytes caps the decoded data of a base64 document block and
	// the text of a plain-text document. Its base64 form (about 27 MiB)
	// stays within the 32 MiB request body and ControlPlane message limits
	// the event and its transcript entry travel through.
	MaxDocumentBytes = 20 << 20
	// MaxURLLen caps the URL of a url source.
	MaxURLLen = 8192
	// MaxFileIDLen caps the file_id of a file source.
	MaxFileIDLen = 256
	// MaxTitleLen caps a document's title and context.
	MaxTitleLen = MaxTextLen
)

// Block types a client may send.
const (
	BlockText         = "text"
	BlockImage        = "image"
	BlockDocument     = "document"
	BlockSearchResult = "search_result"
)

// ImageMediaTypes are the media types of base64 images, in the order error
// messages list them.
var ImageMediaTypes = []string{sniff.JPEG, sniff.PNG, sniff.GIF, sniff.WebP}

// PDFMediaType is the media type of base64 documents.
const PDFMediaType = sniff.PDF

// messageBlocks, resultBlocks and toolResultBlocks are the block types
// user.message, user.custom_tool_result and user.tool_result accept.
var (
	messageBlocks    = []string{BlockText, BlockImage, BlockDocument}
	resultBlocks     = []string{BlockText, BlockImage}
	toolResultBlocks = []string{BlockText, BlockImage, BlockDocument, BlockSearchResult}
)

// block is a validated content block as stored: exactly the members of its
// type, in a fixed order, so that a stored block sent again validates to
// the same bytes.
type block struct {
	Type string  `json:"type"`
	Text *string `json:"text,omitempty"`
	// Source is a *source (image, document) or a string (the URL of a
	// search result).
	Source    any        `json:"source,omitempty"`
	Title     *string    `json:"title,omitempty"`
	Context   *string    `json:"context,omitempty"`
	Content   []block    `json:"content,omitempty"`
	Citations *citations `json:"citations,omitempty"`
}

// citations are the citation settings of a search result.
type citations struct {
	Enabled bool `json:"enabled"`
}

// source is the source of an image or document block.
type source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`
}

// contentBlocks validates the content blocks at path; allowed lists the
// block types accepted there.
func contentBlocks(raws []json.RawMessage, path string, required bool, allowed []string) ([]block, error) {
	if required && len(raws) == 0 {
		return nil, jsonx.Errorf(path, "must contain at least one content block")
	}
	if len(raws) > MaxContentBlocks {
		return nil, jsonx.Errorf(path, "at most %d content blocks are allowed", MaxContentBlocks)
	}
	out := make([]block, 0, len(raws))
	for i, raw := range raws {
		p := fmt.Sprintf("%s[%d]", path, i)
		b, err := contentBlock(raw, p, allowed)
		if err != nil {
			return nil, err
		}
		out = append(out, *b)
	}
	return out, nil
}

func contentBlock(raw json.RawMessage, path string, allowed []string) (*block, error) {
	typ, err := jsonx.ObjectType(raw, path)
	if err != nil {
		return nil, err
	}
	if typ == "" {
		return nil, jsonx.Errorf(path+".type", "is required")
	}
	if !slices.Contains(allowed, typ) {
		return nil, jsonx.Errorf(path+".type", "unsupported content block type %q (expected %s)", typ, orList(allowed))
	}
	switch typ {
	case BlockText:
		var in struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		if in.Text == nil {
			return nil, jsonx.Errorf(path+".text", "is required")
		}
		if len(*in.Text) > MaxTextLen {
			return nil, jsonx.Errorf(path+".text", "must be at most %d bytes", MaxTextLen)
		}
		return &block{Type: typ, Text: in.Text}, nil
	case BlockImage:
		var in struct {
			Type   string          `json:"type"`
			Source json.RawMessage `json:"source"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		src, err := imageSource(in.Source, path+".source")
		if err != nil {
			return nil, err
		}
		return &block{Type: typ, Source: src}, nil
	case BlockSearchResult:
		return searchResultBlock(raw, path)
	default: // BlockDocument
		var in struct {
			Type    string          `json:"type"`
			Source  json.RawMessage `json:"source"`
			Title   *string         `json:"title"`
			Context *string         `json:"context"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		src, err := documentSource(in.Source, path+".source")
		if err != nil {
			return nil, err
		}
		for _, f := range []struct {
			name string
			v    *string
		}{{"title", in.Title}, {"context", in.Context}} {
			if f.v != nil && len(*f.v) > MaxTitleLen {
				return nil, jsonx.Errorf(path+"."+f.name, "must be at most %d bytes", MaxTitleLen)
			}
		}
		return &block{Type: typ, Source: src, Title: in.Title, Context: in.Context}, nil
	}
}

// searchResultBlock validates a search_result block: a source URL, a
// title, text content blocks and optional citation settings.
func searchResultBlock(raw json.RawMessage, path string) (*block, error) {
	var in struct {
		Type      string            `json:"type"`
		Source    *string           `json:"source"`
		Title     *string           `json:"title"`
		Content   []json.RawMessage `json:"content"`
		Citations *struct {
			Enabled *bool `json:"enabled"`
		} `json:"citations"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"source", in.Source}, {"title", in.Title}} {
		if f.v == nil || *f.v == "" {
			return nil, jsonx.Errorf(path+"."+f.name, "is required (a non-empty string)")
		}
		if len(*f.v) > MaxTitleLen {
			return nil, jsonx.Errorf(path+"."+f.name, "must be at most %d bytes", MaxTitleLen)
		}
	}
	content, err := contentBlocks(in.Content, path+".content", true, []string{BlockText})
	if err != nil {
		return nil, err
	}
	b := &block{Type: BlockSearchResult, Source: *in.Source, Title: in.Title, Content: content}
	if in.Citations != nil {
		if in.Citations.Enabled == nil {
			return nil, jsonx.Errorf(path+".citations.enabled", "is required (true or false)")
		}
		b.Citations = &citations{Enabled: *in.Citations.Enabled}
	}
	return b, nil
}

// sourceIn is every member a source may have; which are allowed depends on
// its type.
type sourceIn struct {
	Type      string  `json:"type"`
	MediaType *string `json:"media_type"`
	Data      *string `json:"data"`
	URL       *string `json:"url"`
	FileID    *string `json:"file_id"`
}

// decodeSource decodes a source object whose type is one of types and
// checks that only the members of that type are present.
func decodeSource(raw json.RawMessage, path string, types []string) (*sourceIn, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, jsonx.Errorf(path, "is required")
	}
	var in sourceIn
	if err := jsonx.DecodeObject(raw, &in, path); err != nil {
		return nil, err
	}
	if in.Type == "" {
		return nil, jsonx.Errorf(path+".type", "is required (%s)", orList(types))
	}
	if !slices.Contains(types, in.Type) {
		return nil, jsonx.Errorf(path+".type", "unsupported source type %q (expected %s)", in.Type, orList(types))
	}
	members := map[string]bool{"media_type": in.MediaType != nil, "data": in.Data != nil, "url": in.URL != nil, "file_id": in.FileID != nil}
	want := map[string][]string{"base64": {"media_type", "data"}, "text": {"media_type", "data"}, "url": {"url"}, "file": {"file_id"}}[in.Type]
	for _, name := range []string{"media_type", "data", "url", "file_id"} {
		if members[name] && !slices.Contains(want, name) {
			return nil, jsonx.Errorf(path+"."+name, "is not allowed in a %q source", in.Type)
		}
	}
	switch in.Type {
	case "base64":
		if in.MediaType == nil {
			return nil, jsonx.Errorf(path+".media_type", "is required")
		}
		if in.Data == nil {
			return nil, jsonx.Errorf(path+".data", "is required")
		}
	case "text":
		if in.Data == nil {
			return nil, jsonx.Errorf(path+".data", "is required")
		}
	case "url":
		if in.URL == nil {
			return nil, jsonx.Errorf(path+".url", "is required")
		}
		if err := checkURL(*in.URL, path+".url"); err != nil {
			return nil, err
		}
	case "file":
		if in.FileID == nil {
			return nil, jsonx.Errorf(path+".file_id", "is required")
		}
		if err := checkFileID(*in.FileID, path+".file_id"); err != nil {
			return nil, err
		}
	}
	return &in, nil
}

func imageSource(raw json.RawMessage, path string) (*source, error) {
	in, err := decodeSource(raw, path, []string{"base64", "url", "file"})
	if err != nil {
		return nil, err
	}
	switch in.Type {
	case "url":
		return &source{Type: in.Type, URL: *in.URL}, nil
	case "file":
		return &source{Type: in.Type, FileID: *in.FileID}, nil
	}
	mt := *in.MediaType
	if !slices.Contains(ImageMediaTypes, mt) {
		return nil, jsonx.Errorf(path+".media_type", "must be %s, got %q", orList(ImageMediaTypes), mt)
	}
	if err := checkBase64(*in.Data, mt, MaxImageBytes, path); err != nil {
		return nil, err
	}
	return &source{Type: in.Type, MediaType: mt, Data: *in.Data}, nil
}

func documentSource(raw json.RawMessage, path string) (*source, error) {
	in, err := decodeSource(raw, path, []string{"base64", "text", "url", "file"})
	if err != nil {
		return nil, err
	}
	switch in.Type {
	case "url":
		return &source{Type: in.Type, URL: *in.URL}, nil
	case "file":
		return &source{Type: in.Type, FileID: *in.FileID}, nil
	case "text":
		if in.MediaType != nil && *in.MediaType != "text/plain" {
			return nil, jsonx.Errorf(path+".media_type", "must be \"text/plain\" for a text source, got %q", *in.MediaType)
		}
		if *in.Data == "" {
			return nil, jsonx.Errorf(path+".data", "must not be empty")
		}
		if len(*in.Data) > MaxDocumentBytes {
			return nil, jsonx.Errorf(path+".data", "must be at most %d bytes", MaxDocumentBytes)
		}
		return &source{Type: in.Type, MediaType: "text/plain", Data: *in.Data}, nil
	}
	if mt := *in.MediaType; mt != PDFMediaType {
		return nil, jsonx.Errorf(path+".media_type", "must be %q for a base64 document (plain text uses a \"text\" source), got %q", PDFMediaType, mt)
	}
	if err := checkBase64(*in.Data, PDFMediaType, MaxDocumentBytes, path); err != nil {
		return nil, err
	}
	return &source{Type: in.Type, MediaType: PDFMediaType, Data: *in.Data}, nil
}

// checkBase64 checks that data (at path.data) is canonical standard base64
// (padded, no line breaks) of at most limit bytes whose content is
// mediaType (path.media_type).
func checkBase64(data, mediaType string, limit int, path string) error {
	if data == "" {
		return jsonx.Errorf(path+".data", "must not be empty")
	}
	if len(data)%4 != 0 || strings.ContainsAny(data, "\r\n") {
		return jsonx.Errorf(path+".data", "is not valid base64 (standard alphabet, padded, no line breaks)")
	}
	if size := DecodedLen(data); size > limit {
		return jsonx.Errorf(path+".data", "decodes to %d bytes, more than the %d allowed for %s", size, limit, mediaType)
	}
	dec := base64.NewDecoder(base64.StdEncoding.Strict(), strings.NewReader(data))
	head := make([]byte, 16)
	n, err := io.ReadFull(dec, head)
	if err == nil || err == io.ErrUnexpectedEOF || err == io.EOF {
		_, err = io.Copy(io.Discard, dec)
	}
	if err != nil {
		return jsonx.Errorf(path+".data", "is not valid base64 (standard alphabet, padded, no line breaks)")
	}
	if got := sniff.MediaType(head[:n]); got != mediaType {
		if got == "" {
			return jsonx.Errorf(path+".media_type", "is %q but the data is not %s", mediaType, kindName(mediaType))
		}
		return jsonx.Errorf(path+".media_type", "is %q but the data is %s (%s)", mediaType, kindName(got), got)
	}
	return nil
}

// DecodedLen is the number of bytes the padded base64 text s decodes to
// (for well-formed s, whose length is a multiple of 4).
func DecodedLen(s string) int {
	return len(s)/4*3 - strings.Count(s[max(len(s)-2, 0):], "=")
}

func kindName(mediaType string) string {
	switch mediaType {
	case "image/jpeg":
		return "a JPEG image"
	case "image/png":
		return "a PNG image"
	case "image/gif":
		return "a GIF image"
	case "image/webp":
		return "a WebP image"
	case PDFMediaType:
		return "a PDF document"
	}
	return mediaType
}

func checkURL(s, path string) error {
	if len(s) > MaxURLLen {
		return jsonx.Errorf(path, "must be at most %d bytes", MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return jsonx.Errorf(path, "must be an absolute http or https URL without credentials")
	}
	return nil
}

func checkFileID(id, path string) error {
	if id == "" {
		return jsonx.Errorf(path, "must not be empty")
	}
	if len(id) > MaxFileIDLen {
		return jsonx.Errorf(path, "must be at most %d bytes", MaxFileIDLen)
	}
	for _, r := range id {
		if !idChar(r) {
			return jsonx.Errorf(path, "must hold only letters, digits, '_' and '-', got %q", id)
		}
	}
	return nil
}

func idChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// orList joins items as `"a", "b" or "c"`.
func orList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
