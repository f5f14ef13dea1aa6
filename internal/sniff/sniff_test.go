package sniff_test

import (
	"testing"

	"github.com/mangohq/mango/internal/sniff"
)

func TestMediaType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), sniff.PNG},
		{"jpeg", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F'}, sniff.JPEG},
		{"gif89a", []byte("GIF89a\x01\x00\x01\x00"), sniff.GIF},
		{"gif87a", []byte("GIF87a"), sniff.GIF},
		{"webp", []byte("RIFF\x24\x00\x00\x00WEBPVP8 "), sniff.WebP},
		{"pdf", []byte("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"), sniff.PDF},
		{"riff but wave", []byte("RIFF\x00\x00\x00\x00WAVE"), ""},
		{"riff too short for webp", []byte("RIFF\x00\x00\x00\x00WEB"), ""},
		{"empty", nil, ""},
		{"truncated pdf magic", []byte("%PD"), ""},
		{"text", []byte("hello, world"), ""},
	}
	for _, tt := range tests {
		if got := sniff.MediaType(tt.data); got != tt.want {
			t.Errorf("%s: MediaType(%q) = %q, want %q", tt.name, tt.data, got, tt.want)
		}
	}
}

func TestImage(t *testing.T) {
	t.Parallel()
	for mediaType, want := range map[string]bool{
		sniff.JPEG: true, sniff.PNG: true, sniff.GIF: true, sniff.WebP: true, sniff.PDF: false, "": false, "text/plain": false,
	} {
		if got := sniff.Image(mediaType); got != want {
			t.Errorf("Image(%q) = %v, want %v", mediaType, got, want)
		}
	}
}
