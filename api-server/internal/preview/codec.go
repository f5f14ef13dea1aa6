package preview

import (
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"
)

// maxPayload bounds one NOTIFY payload; PostgreSQL refuses 8000 bytes or
// more.
const maxPayload = 7900

// wireFrame is a Frame in a NOTIFY payload.
type wireFrame struct {
	S string `json:"s"`
	E string `json:"e"`
	K Kind   `json:"k"`
	T string `json:"t"`
	X string `json:"x,omitempty"`
	I int32  `json:"i,omitempty"`
	P int64  `json:"p,omitempty"` // ProducedAt, Unix nanoseconds
}

type wirePayload struct {
	O string            `json:"o"`
	F []json.RawMessage `json:"f"`
}

type payload struct {
	data   string
	frames int
}

// coalesce merges each delta into the previous frame of the same event when
// that frame is a delta of the same content block: the text is appended and
// the earlier production time kept. Order within each event is preserved.
func coalesce(in []Frame) []Frame {
	out := make([]Frame, 0, len(in))
	latest := map[string]int{} // event id → index in out of its latest frame
	for _, f := range in {
		if i, ok := latest[f.EventID]; ok && f.Kind == KindDelta && out[i].Kind == KindDelta &&
			out[i].Index == f.Index && out[i].SessionID == f.SessionID {
			out[i].Text += f.Text
			continue
		}
		latest[f.EventID] = len(out)
		out = append(out, f)
	}
	return out
}

// encode packs frames into NOTIFY payloads under maxPayload, in order,
// splitting the text of a delta that does not fit into one payload.
func encode(origin string, frames []Frame) []payload {
	head := `{"o":` + quote(origin) + `,"f":[`
	budget := maxPayload - len(head) - len(`]}`)
	var out []payload
	cur, n := []byte(head), 0
	flush := func() {
		if n > 0 {
			out = append(out, payload{data: string(append(cur, ']', '}')), frames: n})
		}
		cur, n = []byte(head), 0
	}
	var add func(f Frame)
	add = func(f Frame) {
		b := marshal(f)
		if len(b) > budget && f.Kind == KindDelta && len(f.Text) > 1 {
			a, c := f, f
			cut := len(f.Text) / 2
			for cut > 0 && !utf8.RuneStart(f.Text[cut]) {
				cut--
			}
			if cut == 0 {
				cut = len(f.Text) / 2
			}
			a.Text, c.Text = f.Text[:cut], f.Text[cut:]
			add(a)
			add(c)
			return
		}
		if n > 0 && len(cur)+1+len(b) > maxPayload-len(`]}`) {
			flush()
		}
		if n > 0 {
			cur = append(cur, ',')
		}
		cur = append(cur, b...)
		n++
	}
	for _, f := range frames {
		add(f)
	}
	flush()
	return out
}

func marshal(f Frame) []byte {
	w := wireFrame{S: f.SessionID, E: f.EventID, K: f.Kind, T: f.EventType, X: f.Text, I: f.Index}
	if !f.ProducedAt.IsZero() {
		w.P = f.ProducedAt.UnixNano()
	}
	b, _ := json.Marshal(w) // strings and integers only: cannot fail
	return b
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// decode parses a NOTIFY payload.
func decode(s string) (origin string, frames []Frame, err error) {
	var p wirePayload
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return "", nil, err
	}
	if p.O == "" {
		return "", nil, errors.New("preview payload without origin")
	}
	frames = make([]Frame, 0, len(p.F))
	for _, raw := range p.F {
		var w wireFrame
		if err := json.Unmarshal(raw, &w); err != nil {
			return "", nil, err
		}
		f := Frame{SessionID: w.S, EventID: w.E, Kind: w.K, EventType: w.T, Text: w.X, Index: w.I}
		if w.P != 0 {
			f.ProducedAt = time.Unix(0, w.P)
		}
		frames = append(frames, f)
	}
	return p.O, frames, nil
}
