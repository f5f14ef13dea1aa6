package e2bproto

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

func stream(frames ...[]byte) *bytes.Reader { return bytes.NewReader(bytes.Join(frames, nil)) }

func TestReadProcessStream(t *testing.T) {
	ok := stream(
		EncodeFrame(0, []byte(`{"event":{"start":{"pid":7}}}`)),
		EncodeFrame(0, []byte(`{"event":{"data":{"stdout":"aGk="}}}`)),
		EncodeFrame(0, []byte(`{"event":{"data":{"stderr":"AP8="}}}`)),
		EncodeFrame(0, []byte(`{"event":{"keepalive":{}}}`)),
		EncodeFrame(0, []byte(`{"event":{"end":{"exit_code":3,"exited":true}}}`)),
		EncodeFrame(flagEndStream, []byte(`{}`)),
	)
	var out, errb bytes.Buffer
	code, err := readProcessStream(ok, &out, &errb)
	if err != nil || code != 3 || out.String() != "hi" || errb.String() != "\x00\xff" {
		t.Errorf("got code %d err %v stdout %q stderr %q", code, err, out.String(), errb.String())
	}

	bad := map[string]*bytes.Reader{
		"invalid JSON":      stream(EncodeFrame(0, []byte(`{not json`))),
		"truncated header":  stream([]byte{0, 0, 0}),
		"truncated body":    stream(EncodeFrame(0, []byte(`{"event":{}}`))[:8]),
		"compressed":        stream(EncodeFrame(flagCompressed, []byte(`{}`))),
		"unknown flags":     stream(EncodeFrame(0x80, []byte(`{}`))),
		"oversized":         stream([]byte{0, 0xff, 0xff, 0xff, 0xff}),
		"no end of stream":  stream(EncodeFrame(0, []byte(`{"event":{"end":{}}}`))),
		"no end event":      stream(EncodeFrame(flagEndStream, []byte(`{}`))),
		"invalid EOS JSON":  stream(EncodeFrame(flagEndStream, []byte(`nope`))),
		"invalid base64":    stream(EncodeFrame(0, []byte(`{"event":{"data":{"stdout":"!!"}}}`))),
		"eos after nothing": stream(EncodeFrame(flagEndStream, []byte(`{"metadata":{}}`))),
	}
	for name, r := range bad {
		if _, err := readProcessStream(r, &out, &errb); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err = %v, want ErrProtocol", name, err)
		}
	}
	var ce *ConnectError
	_, err = readProcessStream(stream(EncodeFrame(flagEndStream, []byte(`{"error":{"code":"not_found","message":"gone"}}`))), &out, &errb)
	if !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("end-of-stream error = %v, want a ConnectError", err)
	}
}

func TestRetryAfter(t *testing.T) {
	// send reads Retry-After with httpcall.RetryAfterHeader.
	if d, ok := httpcall.RetryAfterHeader(http.Header{"Retry-After": {"2"}}, time.Now()); !ok || d.Seconds() != 2 {
		t.Errorf("RetryAfterHeader(2) = %v, %v", d, ok)
	}
	if _, ok := httpcall.RetryAfterHeader(http.Header{"Retry-After": {"soon"}}, time.Now()); ok {
		t.Error("RetryAfterHeader(soon) parsed")
	}
	c := Config{}.withDefaults()
	waits := c.retryWaits()
	for i := range 20 {
		if d := c.next(waits); d <= 0 || d > c.RetryMax {
			t.Errorf("wait %d = %v, want within (0, %v]", i, d, c.RetryMax)
		}
	}
}

// TestRetryWaits: the i-th wait is RetryBase doubled i times, capped at
// RetryMax, plus up to 20% jitter, never above RetryMax (to the
// nanosecond).
func TestRetryWaits(t *testing.T) {
	c := Config{RetryBase: 100 * time.Millisecond, RetryMax: 2 * time.Second}.withDefaults()
	for range 50 {
		waits := c.retryWaits()
		d := c.RetryBase
		for i := range 8 {
			lo, hi := min(d, c.RetryMax)-1, min(d+d/5+1, c.RetryMax) // 1ns of float rounding either way
			if got := c.next(waits); got < lo || got > hi {
				t.Fatalf("wait %d = %v, want within [%v, %v]", i, got, lo, hi)
			}
			d = min(2*d, c.RetryMax)
		}
	}
}
