package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// runEvents measures event append throughput with concurrent senders, each
// on its own session (-mode fanout measures the streams).
func runEvents(c *client, d time.Duration, senders int) error {
	agentID, err := c.createAgent()
	if err != nil {
		return err
	}
	b, err := c.do(http.MethodPost, "/v1/environments", []byte(fmt.Sprintf(`{"name":"bench-%d"}`, time.Now().UnixNano())))
	if err != nil {
		return err
	}
	var env struct{ ID string }
	if err := json.Unmarshal(b, &env); err != nil {
		return err
	}
	newSession := func() (string, error) {
		b, err := c.do(http.MethodPost, "/v1/sessions", []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agentID, env.ID)))
		if err != nil {
			return "", err
		}
		var s struct{ ID string }
		return s.ID, json.Unmarshal(b, &s)
	}

	// Throughput.
	var sent atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	for range senders {
		id, err := newSession()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := c.do(http.MethodPost, "/v1/sessions/"+id+"/events", []byte(`{"events":[{"type":"user.message","content":[{"type":"text","text":"x"}]}]}`)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	fmt.Printf("event append  %d senders: %d events in %v = %.0f events/s\n", senders, sent.Load(), d, float64(sent.Load())/d.Seconds())

	return nil
}
