package tools

import (
	"strings"
	"testing"
)

func TestMatchSegments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "sub/a.go", false},
		{"**/*.go", "a.go", true},
		{"**/*.go", "sub/deep/a.go", true},
		{"**/*.go", "sub/a.txt", false},
		{"**", "a", true},
		{"**", "a/b/c", true},
		{"sub/**", "sub/a/b", true},
		{"sub/**", "other/a", false},
		{"a/**/b/**/c.go", "a/b/c.go", true},
		{"a/**/b/**/c.go", "a/x/y/b/z/c.go", true},
		{"a/**/b/**/c.go", "a/x/y/c.go", false},
		{"**/**/**/x", "x", true},
		{"[ab].go", "b.go", true},
		{"?.go", "ab.go", false},
		{"*", ".hidden", true},
		{"a.go", "a.go", true},
	}
	for _, tc := range tests {
		got := matchSegments(strings.Split(tc.pattern, "/"), strings.Split(tc.name, "/"))
		if got != tc.want {
			t.Errorf("matchSegments(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"plain":   "'plain'",
		"it's":    `'it'\''s'`,
		"$x `y`":  "'$x `y`'",
		"":        "''",
		"a\nb'\\": "'a\nb'\\''\\'",
	}
	for in, want := range tests {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	short := strings.Repeat("é", 10)
	if got := clip(short); got != short {
		t.Errorf("clip(short) = %q, want it unchanged", got)
	}
	long := strings.Repeat("é", maxStreamShown) // 2 bytes a rune
	got := clip(long)
	if !strings.Contains(got, "bytes omitted") || len(got) > maxStreamShown+100 {
		t.Errorf("clip(long) has %d bytes, omission note %v; want about %d with a note", len(got), strings.Contains(got, "bytes omitted"), maxStreamShown)
	}
	if strings.ContainsRune(got, '\uFFFD') || !strings.HasPrefix(got, "é") || !strings.HasSuffix(got, "é") {
		t.Error("clip(long) split a UTF-8 sequence")
	}
}
