package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/apierror"
)

// FuzzCursorDecode checks that no page value makes a decoder panic, that
// every rejection is a public 400, and that whatever a decoder accepts is a
// position its encoder writes back to the same position, with a creation
// time the API can express.
func FuzzCursorDecode(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 678_901_000, time.UTC)
	for _, s := range []string{
		timeCursor(now, "agent_01"), timeCursor(now, "env_01:with:colons"), sessionCursor("n", now, "sesn_01"),
		sessionCursor("p", time.Unix(0, 0), "sesn_02"), eventCursor(0), eventCursor(1 << 40), versionCursor(1), versionCursor(7),
		// Either side of the bounds of years 1 to 9999.
		encodeCursor("t:-62135596800000001:x"), encodeCursor("t:-62135596800000000:x"),
		encodeCursor("t:253402300799999999:x"), encodeCursor("t:253402300800000000:x"),
		encodeCursor("t:-9223372036854775808:x"), encodeCursor("s:-1"), encodeCursor("s:+5"), encodeCursor("v:0"),
		encodeCursor("t:1:"), encodeCursor("x:1:y"), encodeCursor("t::"), encodeCursor(""), "dDox", "%%%", "AAAA=", "====", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, page string) {
		pos, err := decodeCursor(page)
		if err != nil {
			wantPublic(t, "decodeCursor", err)
			return
		}
		if tm, id, err := parseTimeCursor(pos); err == nil {
			checkTime(t, tm)
			if tm2, id2, err := parseTimeCursor(decoded(t, timeCursor(tm, id))); err != nil || !tm2.Equal(tm) || id2 != id {
				t.Fatalf("time cursor %q read as (%v, %q), re-encoded reads (%v, %q, %v)", pos, tm, id, tm2, id2, err)
			}
		} else {
			wantPublic(t, "parseTimeCursor", err)
		}
		if dir, tm, id, err := parseSessionCursor(pos); err == nil {
			checkTime(t, tm)
			dir2, tm2, id2, err := parseSessionCursor(decoded(t, sessionCursor(dir, tm, id)))
			if err != nil || dir2 != dir || !tm2.Equal(tm) || id2 != id {
				t.Fatalf("session cursor %q read as (%s, %v, %q), re-encoded reads (%s, %v, %q, %v)", pos, dir, tm, id, dir2, tm2, id2, err)
			}
		} else {
			wantPublic(t, "parseSessionCursor", err)
		}
		if seq, err := parseEventCursor(pos); err == nil {
			if seq2, err := parseEventCursor(decoded(t, eventCursor(seq))); err != nil || seq2 != seq || seq < 0 {
				t.Fatalf("event cursor %q read as %d, re-encoded reads %d (%v)", pos, seq, seq2, err)
			}
		} else {
			wantPublic(t, "parseEventCursor", err)
		}
		if v, err := parseVersionCursor(pos); err == nil {
			if v2, err := parseVersionCursor(decoded(t, versionCursor(v))); err != nil || v2 != v || v < 1 {
				t.Fatalf("version cursor %q read as %d, re-encoded reads %d (%v)", pos, v, v2, err)
			}
		} else {
			wantPublic(t, "parseVersionCursor", err)
		}
	})
}

// FuzzCursorRoundTrip checks that every position an encoder is given
// decodes to exactly that position, through URL-safe page values, and that
// the kinds do not mix: a session cursor is not an agent cursor.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(time.Date(2026, 1, 2, 3, 4, 5, 678_901_000, time.UTC).UnixMicro(), "agent_011CZkZTMr5ihVHjdC8Lpw3W", int64(42))
	f.Add(int64(0), "a:b", int64(0))
	f.Add(minCursorMicro, "x", int64(1))
	f.Add(maxCursorMicro, "\x00\xff\n", int64(1<<62))
	f.Add(minCursorMicro-1, "x", int64(-1))
	f.Fuzz(func(t *testing.T, micro int64, id string, n int64) {
		tm := time.UnixMicro(micro).UTC()
		inRange := micro >= minCursorMicro && micro <= maxCursorMicro
		for _, page := range []string{timeCursor(tm, id), sessionCursor("n", tm, id), sessionCursor("p", tm, id), eventCursor(n), versionCursor(n)} {
			if strings.Trim(page, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				t.Fatalf("page value %q is not URL-safe base64", page)
			}
		}
		gotT, gotID, err := parseTimeCursor(decoded(t, timeCursor(tm, id)))
		switch {
		case id != "" && inRange && (err != nil || gotT.UnixMicro() != micro || gotID != id):
			t.Fatalf("timeCursor(%d, %q) reads (%d, %q, %v)", micro, id, gotT.UnixMicro(), gotID, err)
		case !inRange && err == nil:
			t.Fatalf("timeCursor(%d µs, year %d) accepted; want a 400 outside years 1 to 9999", micro, tm.Year())
		}
		for _, dir := range []string{"n", "p"} {
			pos := decoded(t, sessionCursor(dir, tm, id))
			gotDir, gotT, gotID, err := parseSessionCursor(pos)
			if id != "" && inRange && (err != nil || gotDir != dir || gotT.UnixMicro() != micro || gotID != id) {
				t.Fatalf("sessionCursor(%s, %d, %q) reads (%s, %d, %q, %v)", dir, micro, id, gotDir, gotT.UnixMicro(), gotID, err)
			}
			if _, _, err := parseTimeCursor(pos); err == nil {
				t.Fatalf("session cursor %q accepted as a time cursor", pos)
			}
		}
		if _, _, _, err := parseSessionCursor(decoded(t, timeCursor(tm, id))); err == nil {
			t.Fatalf("time cursor accepted as a session cursor")
		}
		if got, err := parseEventCursor(decoded(t, eventCursor(n))); n >= 0 && (err != nil || got != n) {
			t.Fatalf("eventCursor(%d) reads %d (%v)", n, got, err)
		}
		if got, err := parseVersionCursor(decoded(t, versionCursor(n))); n >= 1 && (err != nil || got != n) {
			t.Fatalf("versionCursor(%d) reads %d (%v)", n, got, err)
		}
	})
}

func decoded(t *testing.T, page string) string {
	t.Helper()
	pos, err := decodeCursor(page)
	if err != nil {
		t.Fatalf("decodeCursor(%q) of an encoded cursor: %v", page, err)
	}
	return pos
}

func wantPublic(t *testing.T, what string, err error) {
	t.Helper()
	var pub *apierror.Error
	if !errors.As(err, &pub) || pub.Status != http.StatusBadRequest || !strings.HasPrefix(pub.Message, "page: ") {
		t.Fatalf("%s: error %T (%v), want a public 400 about page", what, err, err)
	}
}

func checkTime(t *testing.T, tm time.Time) {
	t.Helper()
	if tm.Year() < 1 || tm.Year() > 9999 || tm.Location() != time.UTC {
		t.Fatalf("cursor time %v, want UTC within years 1 to 9999", tm)
	}
}
