package eventspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// sendSeeds are POST /v1/sessions/{id}/events bodies: valid ones of every
// type and near misses.
var sendSeeds = []string{
	`{"events":[{"type":"user.message","content":[{"type":"text","text":"Hello"}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"text","text":""},{"type":"text","text":"a\nb \u00e9 \ud83d\ude00 <b>&amp;</b>"}]}]}`,
	`{"events":[{"type":"user.interrupt"}]}`,
	`{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_01","content":[{"type":"text","text":"42"}],"is_error":true}]}`,
	`{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_01"}]}`,
	`{"events":[{"type":"user.tool_confirmation","tool_use_id":"sevt_02","result":"allow"}]}`,
	`{"events":[{"type":"user.tool_confirmation","tool_use_id":"sevt_02","result":"deny","deny_message":"not now"}]}`,
	`{"events":[{"type":"user.interrupt"},{"type":"user.message","content":[{"type":"text","text":"instead"}]}]}`,
	`{"events":[{"Type":"user.interrupt"}]}`,
	`{"events":[{"type":"user.interrupt","type":"user.message","content":[{"type":"text","text":"dup"}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"image","source":{}}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lGODlhAQABAA=="}}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"R0lGODlhAQABAA=="}}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"},"title":"\u00e9"}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"a\u0000b"},"context":""}]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}`,
	`{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_01","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}`,
	`{"events":[{"type":"user.message","content":[]}]}`,
	`{"events":[{"type":"user.message","content":[{"type":"text"}]}]}`,
	`{"events":[{"type":"user.tool_confirmation","tool_use_id":"x","result":"allow","deny_message":"no"}]}`,
	`{"events":[{"type":"agent.message","content":[]}]}`,
	`{"events":[{"type":7}]}`,
	`{"events":[null]}`,
	`{"events":[]}`,
	`{"events":{}}`,
	`{"events":[{"type":"user.interrupt"}]} trailing`,
	`{"events":[{"type":"user.interrupt","extra":1}]}`,
	"{\"events\":[{\"type\":\"user.message\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\xfe\"}]}]}",
	`[]`,
	`null`,
	``,
	`{`,
}

// FuzzParseSend checks that ParseSend never panics, that every rejection is
// a public *jsonx.Error, and that accepted events are stable: sent again as
// the API shows them (type plus the stored body), they validate to exactly
// the same events.
func FuzzParseSend(f *testing.F) {
	for _, s := range sendSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := ParseSend(body)
		if err != nil {
			if pub := (*jsonx.Error)(nil); !errors.As(err, &pub) {
				t.Fatalf("ParseSend(%q) error %T (%v), want a public *jsonx.Error", body, err, err)
			}
			return
		}
		if len(events) == 0 || len(events) > MaxEventsPerRequest {
			t.Fatalf("ParseSend(%q) accepted %d events, want 1 to %d", body, len(events), MaxEventsPerRequest)
		}
		for i, ev := range events {
			if !json.Valid(ev.Body) || !utf8.Valid(ev.Body) || !bytes.HasPrefix(ev.Body, []byte("{")) {
				t.Fatalf("event %d body %q is not a valid UTF-8 JSON object", i, ev.Body)
			}
		}
		again, err := ParseSend(resend(t, events))
		if err != nil {
			t.Fatalf("accepted events %+v do not validate again: %v", events, err)
		}
		if !reflect.DeepEqual(again, events) {
			t.Fatalf("events changed when sent again:\nfirst  %+v\nsecond %+v", events, again)
		}
	})
}

// resend is the body that sends events again as the API shows them: each
// event's type followed by the members of its stored body.
func resend(t *testing.T, events []Event) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"events":[`)
	for i, ev := range events {
		if i > 0 {
			b.WriteByte(',')
		}
		typ, err := json.Marshal(ev.Type)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(`{"type":`)
		b.Write(typ)
		if members := bytes.TrimSpace(ev.Body); len(members) > 2 {
			b.WriteByte(',')
			b.Write(members[1:])
		} else {
			b.WriteByte('}')
		}
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
