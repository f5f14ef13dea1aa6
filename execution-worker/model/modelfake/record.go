package modelfake

import (
	"encoding/json"
	"os"
	"sync"
)

// RecordEnv names the file to which a worker's fake model appends every
// request it answers, one JSON object per line ({"system", "messages"}).
// Tests of real worker processes read it to see what reached the model.
const RecordEnv = "MANGO_FAKE_MODEL_RECORD"

// RecordTo makes c append every request it answers to the file at path
// (created when missing). A write that fails is dropped: the record is a
// test aid and never fails a call.
func (c *Client) RecordTo(path string) {
	var mu sync.Mutex
	c.SetObserver(func(call Call) {
		line, err := json.Marshal(map[string]any{"system": call.Request.System, "messages": call.Request.Messages})
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return
		}
		defer func() { _ = f.Close() }()
		_, _ = f.Write(append(line, '\n'))
	})
}
