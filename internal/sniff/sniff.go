// Package sniff tells the media type of content from its magic bytes, for
// the kinds Mango accepts as model input: JPEG, PNG, GIF and WebP images
// and PDF documents. The api-server checks uploaded and inline content with
// it, and the worker with the same rule before it sends a file to the
// model, so both agree on what a file is.
package sniff

import "bytes"

// Media types MediaType reports.
const (
	JPEG = "image/jpeg"
	PNG  = "image/png"
	GIF  = "image/gif"
	WebP = "image/webp"
	PDF  = "application/pdf"
)

// MediaType returns the media type the magic bytes at the start of data
// show (JPEG, PNG, GIF, WebP or PDF), or "" for anything else. The first
// 12 bytes are enough.
func MediaType(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return JPEG
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return PNG
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return GIF
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WEBP":
		return WebP
	case bytes.HasPrefix(data, []byte("%PDF-")):
		return PDF
	}
	return ""
}

// Image reports whether mediaType, as MediaType returns it, is an image.
func Image(mediaType string) bool {
	switch mediaType {
	case JPEG, PNG, GIF, WebP:
		return true
	}
	return false
}
