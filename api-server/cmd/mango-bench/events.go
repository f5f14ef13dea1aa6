package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runEvents measures (1) event append throughput with concurrent senders,
// each on its own session, and (2) the latency from the start of a send to
// its arrival on each of `streams` SSE clients watching that session (an
// upper bound of commit-to-client latency: it includes the whole append).
func runEvents(c *client, rate float64, d time.Duration, streams, senders int) error {
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

	// Fan-out latency.
	id, err := newSession()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	starts := map[string]time.Time{}
	var lat []time.Duration
	ready := make(chan struct{}, streams)
	streamClient := &http.Client{Transport: &http.Transport{MaxConnsPerHost: streams + 10, MaxIdleConnsPerHost: streams + 10}}
	for range streams {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+id+"/events/stream", nil)
			req.Header.Set("x-api-key", c.key)
			resp, err := streamClient.Do(req)
			if err != nil {
				ready <- struct{}{}
				return
			}
			defer func() { _ = resp.Body.Close() }()
			ready <- struct{}{}
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok || !strings.Contains(data, `"user.message"`) {
					continue
				}
				now := time.Now()
				var ev struct {
					Content []struct{ Text string } `json:"content"`
				}
				if json.Unmarshal([]byte(data), &ev) != nil || len(ev.Content) == 0 {
					continue
				}
				mu.Lock()
				if t0, ok := starts[ev.Content[0].Text]; ok {
					lat = append(lat, now.Sub(t0))
				}
				mu.Unlock()
			}
		}()
	}
	for range streams {
		<-ready
	}
	time.Sleep(200 * time.Millisecond)
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	for i := range n {
		key := "m" + strconv.Itoa(i)
		mu.Lock()
		starts[key] = time.Now()
		mu.Unlock()
		if _, err := c.do(http.MethodPost, "/v1/sessions/"+id+"/events", []byte(`{"events":[{"type":"user.message","content":[{"type":"text","text":"`+key+`"}]}]}`)); err != nil {
			return err
		}
		time.Sleep(interval)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("%d events x %d streams (deliveries %d of %d)\n", n, streams, len(lat), n*streams)
	report("send->SSE", lat)
	return nil
}
