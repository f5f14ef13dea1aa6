package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Delivery is one event due at one endpoint.
type Delivery struct {
	EventID    string    // the webhook-id: the same on every attempt (receivers dedupe on it)
	EventType  string    // the event's type ("session.status_idled"), for spans
	EndpointID string    // the endpoint's id, the unit of isolation (PerEndpoint)
	URL        string    // where the body is POSTed
	Secret     string    // whsec_...
	Body       []byte    // the payload, identical on every attempt
	Attempt    int       // attempts made before this one (0 for the first)
	CreatedAt  time.Time // when the event was written: retries stop RetryWindow after it
}

// Attempt is the outcome of one delivery attempt.
//
// A Skipped attempt is not an attempt: the relay claimed the delivery but
// its endpoint already had PerEndpoint attempts in flight, so it sent
// nothing. The Store must then only release the lease and make the
// delivery due again at NextAt, leaving its attempt count, its last status
// and its last error as they were.
type Attempt struct {
	EventID, EndpointID string        // the delivery's event and endpoint
	At                  time.Time     // when the attempt started (Relay.Now)
	StatusCode          int           // 0: no HTTP answer
	Error               string        // why it failed (no secret, no body), "" on success
	Latency             time.Duration // from sending the request to reading the answer
	Delivered           bool          // 2xx
	NextAt              *time.Time    // when to retry; nil: no retry (delivered, or given up)
	GaveUp              bool          // retries exhausted (RetryWindow passed): the store may disable the endpoint
	Skipped             bool          // nothing was sent (endpoint at its cap): not counted, due again at NextAt
}

// Store is the database side.
type Store interface {
	// ClaimDue leases up to limit deliveries due at now (next attempt time reached, not delivered, not
	// given up, endpoint enabled) for lease; a lease that expires makes a delivery claimable again.
	ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]Delivery, error)
	// Record stores an attempt's outcome and releases the delivery's lease.
	Record(ctx context.Context, a Attempt) error
}

// Stats describes the deliveries still to be made.
type Stats struct {
	Pending   int64         // deliveries the relay will attempt: not delivered, not given up, endpoint enabled
	OldestAge time.Duration // age of the oldest one's event; 0 when there is none
}

// StatsStore is a Store that can also count what is left to deliver; the
// relay of such a Store refreshes mango_webhook_pending and
// mango_webhook_oldest_pending_age_seconds every StatsInterval.
type StatsStore interface {
	Store
	// Stats counts the pending deliveries at now. It only reads.
	Stats(ctx context.Context, now time.Time) (Stats, error)
}

// Retry schedule: the delay after the first failure is BackoffBase,
// doubling per failure up to BackoffMax, each less a random jitter of up to
// a quarter (see Backoff).
const (
	// BackoffBase is the nominal delay after a delivery's first failure.
	BackoffBase = 5 * time.Second
	// BackoffMax caps the delay between two attempts.
	BackoffMax = time.Hour
	// DefaultRetryWindow is how long after its event a delivery is retried.
	DefaultRetryWindow = 24 * time.Hour
)

// Limits of one attempt.
const (
	// maxResponseBody is how much of an answer is read (and discarded), so
	// the connection can be reused without reading an endless body.
	maxResponseBody = 4 << 10
	// recordTimeout bounds one Store.Record call.
	recordTimeout = 10 * time.Second
	// leaseMargin is added to Timeout for the claim's lease, so the lease
	// outlasts the attempt and its Record.
	leaseMargin = recordTimeout + 20*time.Second
	// maxClaimRounds bounds the claims one wake-up makes while each claim
	// fills all the room it asked for.
	maxClaimRounds = 8
	// statsTimeout bounds one StatsStore.Stats call.
	statsTimeout = 2 * time.Second
)

// Relay delivers due webhook deliveries from a Store. Set its fields, then
// call Run once; zero fields take the defaults in brackets.
//
// Isolation: at most PerEndpoint attempts run per endpoint and MaxInFlight
// overall, each in its own goroutine bounded by Timeout. A claim asks for
// no more deliveries than MaxInFlight leaves room for, so every claimed
// delivery can start unless its endpoint is at its cap; such a delivery is
// released at once as a Skipped attempt due again Poll later (not counted
// as an attempt), so a slow endpoint holds at most PerEndpoint slots and
// never delays the deliveries of others. Deliveries of one endpoint are
// not ordered.
//
// Delivery is at least once: a relay that stops between an endpoint's
// answer and Record, or a Record that fails, leaves the lease to expire and
// the delivery to be attempted again with the same webhook-id.
type Relay struct {
	Store       Store
	Client      *http.Client     // [a new http.Client]; redirects are never followed
	Now         func() time.Time // [time.Now]; schedules and signatures use it
	Logger      *slog.Logger     // [slog.Default()]
	PerEndpoint int              // attempts in flight per endpoint [4]
	MaxInFlight int              // attempts in flight overall [64]
	Poll        time.Duration    // how often due deliveries are claimed without a Wake [1s]
	Timeout     time.Duration    // bound of one attempt, answer included [10s]
	RetryWindow time.Duration    // retries stop this long after the event's CreatedAt [24h]
	MaxDelay    time.Duration    // the longest wait between two attempts [BackoffMax]
	// StatsInterval is how often the pending gauges are refreshed, when
	// Store is a StatsStore [5s].
	StatsInterval time.Duration
	// Tracer makes a span of each attempt, "webhook.deliver" [a no-op
	// tracer].
	Tracer trace.Tracer
	// Metrics receive the relay's counts [unregistered metrics].
	Metrics *Metrics

	once sync.Once
	wake chan struct{}
	cfg  settings

	mu       sync.Mutex
	inFlight int
	perEP    map[string]int
	more     bool // the last claim filled all the room: more may be due
}

// settings are a Relay's fields with the defaults applied.
type settings struct {
	client      *http.Client
	now         func() time.Time
	log         *slog.Logger
	perEndpoint int
	maxInFlight int
	poll        time.Duration
	timeout     time.Duration
	retryWindow time.Duration
	maxDelay    time.Duration
	lease       time.Duration
	statsEvery  time.Duration
	tracer      trace.Tracer
	metrics     *Metrics
}

// init makes the wake channel, once, so Wake may come before Run.
func (r *Relay) init() {
	r.once.Do(func() { r.wake = make(chan struct{}, 1) })
}

// settings returns r's fields with the defaults applied.
func (r *Relay) settings() settings {
	s := settings{
		client: r.Client, now: r.Now, log: r.Logger,
		perEndpoint: r.PerEndpoint, maxInFlight: r.MaxInFlight,
		poll: r.Poll, timeout: r.Timeout, retryWindow: r.RetryWindow, maxDelay: r.MaxDelay,
		statsEvery: r.StatsInterval, tracer: r.Tracer, metrics: r.Metrics,
	}
	if s.client == nil {
		s.client = &http.Client{}
	}
	c := *s.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	s.client = &c
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	positive(&s.perEndpoint, 4)
	positive(&s.maxInFlight, 64)
	positive(&s.poll, time.Second)
	positive(&s.timeout, 10*time.Second)
	positive(&s.retryWindow, DefaultRetryWindow)
	positive(&s.maxDelay, BackoffMax)
	positive(&s.statsEvery, 5*time.Second)
	s.lease = s.timeout + leaseMargin
	if s.tracer == nil {
		s.tracer = noop.NewTracerProvider().Tracer("")
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	return s
}

// positive sets *v to def unless it is positive.
func positive[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Wake tells the relay that a delivery was committed: Run claims at once
// instead of at its next poll. It never blocks; wakes before Run starts or
// while a claim is pending coalesce into one.
func (r *Relay) Wake() {
	r.init()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run claims and delivers due deliveries until ctx ends, then waits for the
// attempts in flight (each bounded by Timeout) and their Records, and
// returns nil. It fails at once when Store is nil. Run must not be called
// twice at the same time.
func (r *Relay) Run(ctx context.Context) error {
	if r.Store == nil {
		return errors.New("webhooks relay: Store is nil, want the database side")
	}
	r.init()
	r.cfg = r.settings()
	r.perEP = make(map[string]int)
	var wg sync.WaitGroup
	defer wg.Wait()
	poll := time.NewTimer(0)
	defer poll.Stop()
	var statsAt time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		case <-r.wake:
		}
		r.claim(ctx, &wg)
		if time.Since(statsAt) >= r.cfg.statsEvery && ctx.Err() == nil {
			statsAt = time.Now()
			r.refreshStats(ctx)
		}
		poll.Reset(r.cfg.poll)
	}
}

// refreshStats sets the pending gauges from the Store, when it is a
// StatsStore; a failure leaves them as they were.
func (r *Relay) refreshStats(ctx context.Context) {
	ss, ok := r.Store.(StatsStore)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	st, err := ss.Stats(ctx, r.cfg.now())
	if err != nil {
		r.cfg.log.WarnContext(ctx, "webhook deliveries: read stats failed", "err", err)
		return
	}
	r.cfg.metrics.setStats(st)
}

// claim claims due deliveries for the room left and starts them, claiming
// again while a claim fills all the room it asked for.
func (r *Relay) claim(ctx context.Context, wg *sync.WaitGroup) {
	for range maxClaimRounds {
		room := r.room()
		if room == 0 || ctx.Err() != nil {
			return
		}
		now := r.cfg.now()
		ds, err := r.Store.ClaimDue(ctx, now, room, r.cfg.lease)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.log.WarnContext(ctx, "webhook deliveries: claim failed", "err", err)
			}
			return
		}
		for _, d := range ds {
			if !r.acquire(d.EndpointID) {
				r.skip(ctx, d, now)
				continue
			}
			wg.Go(func() {
				defer r.release(d.EndpointID)
				r.deliver(ctx, d)
			})
		}
		if len(ds) < room {
			return
		}
		r.setMore()
	}
}

// room returns how many more attempts may start.
func (r *Relay) room() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.cfg.maxInFlight-r.inFlight, 0)
}

// acquire takes a slot for an attempt at endpoint, unless the endpoint or
// the relay is at its cap.
func (r *Relay) acquire(endpoint string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight >= r.cfg.maxInFlight || r.perEP[endpoint] >= r.cfg.perEndpoint {
		return false
	}
	r.inFlight++
	r.perEP[endpoint]++
	return true
}

// release frees an attempt's slot; when the last claim left due
// deliveries behind for want of room, it wakes Run to claim them.
func (r *Relay) release(endpoint string) {
	r.mu.Lock()
	r.inFlight--
	if r.perEP[endpoint]--; r.perEP[endpoint] == 0 {
		delete(r.perEP, endpoint)
	}
	more := r.more
	r.more = false
	r.mu.Unlock()
	if more {
		r.Wake()
	}
}

// setMore notes that a claim filled all the room it asked for.
func (r *Relay) setMore() {
	r.mu.Lock()
	r.more = true
	r.mu.Unlock()
}

// skip releases a claimed delivery whose endpoint is at its cap, due again
// a Poll later, without counting an attempt.
func (r *Relay) skip(ctx context.Context, d Delivery, now time.Time) {
	next := now.Add(r.cfg.poll)
	a := Attempt{EventID: d.EventID, EndpointID: d.EndpointID, At: now, NextAt: &next, Skipped: true}
	r.cfg.metrics.observe(a)
	if err := r.Store.Record(ctx, a); err != nil && ctx.Err() == nil {
		r.cfg.log.WarnContext(ctx, "webhook delivery: record skip failed; its lease will expire",
			"event_id", d.EventID, "endpoint_id", d.EndpointID, "err", err)
	}
}

// deliver makes one attempt of d and records its outcome. The attempt and
// the Record outlive ctx (each bounded), so a stopping relay records what
// it sent.
func (r *Relay) deliver(ctx context.Context, d Delivery) {
	base := context.WithoutCancel(ctx)
	sctx, span := r.startAttempt(base, d)
	a := r.attempt(sctx, d)
	next, gaveUp := schedule(d, a.Delivered, r.cfg.now(), r.cfg.retryWindow, min(Backoff(d.Attempt+1), r.cfg.maxDelay))
	a.NextAt, a.GaveUp = next, gaveUp
	endAttempt(span, a)
	r.cfg.metrics.observe(a)
	rctx, cancel := context.WithTimeout(base, recordTimeout)
	defer cancel()
	log := r.cfg.log.With("event_id", d.EventID, "endpoint_id", d.EndpointID, "attempt", d.Attempt+1)
	if err := r.Store.Record(rctx, a); err != nil {
		log.ErrorContext(sctx, "webhook delivery: record failed; its lease will expire and it will be attempted again", "err", err)
	}
	switch {
	case a.Delivered:
		log.DebugContext(sctx, "webhook delivered", "status", a.StatusCode, "latency", a.Latency)
	case a.GaveUp:
		log.WarnContext(sctx, "webhook delivery: gave up, retry window passed", "status", a.StatusCode, "err", a.Error)
	default:
		log.InfoContext(sctx, "webhook delivery failed; will retry", "status", a.StatusCode, "err", a.Error, "next_at", *a.NextAt)
	}
}

// Attribute keys of the attempt span beside the HTTP ones.
const (
	attrEndpointID = attribute.Key("mango.webhook.endpoint_id")
	attrEventID    = attribute.Key("mango.webhook.event_id")
	attrEventType  = attribute.Key("mango.webhook.event_type")
	attrAttempt    = attribute.Key("mango.webhook.attempt")
	attrResult     = attribute.Key("mango.webhook.result")
)

// startAttempt starts the span of one attempt of d, "webhook.deliver", a
// root: the event's own trace is not kept. It names the endpoint by id and
// host only: never the URL's path or query, the secret or the body.
func (r *Relay) startAttempt(ctx context.Context, d Delivery) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attrEndpointID.String(d.EndpointID), attrEventID.String(d.EventID),
		attrEventType.String(d.EventType), attrAttempt.Int(d.Attempt + 1), semconv.HTTPRequestMethodPost}
	if u, err := url.Parse(d.URL); err == nil && u.Hostname() != "" {
		attrs = append(attrs, semconv.ServerAddress(u.Hostname()))
	}
	return r.cfg.tracer.Start(ctx, "webhook.deliver", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
}

// endAttempt ends an attempt's span with its answer and result; a failed
// attempt's error (which holds no secret, body or URL) is its status.
func endAttempt(span trace.Span, a Attempt) {
	if a.StatusCode != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(a.StatusCode))
	}
	span.SetAttributes(attrResult.String(result(a)))
	if !a.Delivered {
		span.SetStatus(codes.Error, a.Error)
	}
	span.End()
}

// attempt POSTs d's signed body once, within Timeout, and returns the
// outcome without its schedule (NextAt, GaveUp).
func (r *Relay) attempt(ctx context.Context, d Delivery) Attempt {
	a := Attempt{EventID: d.EventID, EndpointID: d.EndpointID, At: r.cfg.now()}
	h, err := Headers(d.Secret, d.EventID, a.At, d.Body)
	if err != nil {
		a.Error = "sign: " + err.Error()
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		a.Error = "build request: " + err.Error()
		return a
	}
	req.Header = h
	start := time.Now()
	resp, err := r.cfg.client.Do(req)
	if err != nil {
		a.Latency = time.Since(start)
		a.Error = r.transportError(ctx, err)
		return a
	}
	// The status is the answer: a body cut short changes nothing.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()
	a.Latency = time.Since(start)
	a.StatusCode = resp.StatusCode
	a.Delivered, a.Error = judge(resp)
	return a
}

// judge reports whether resp acknowledges a delivery (2xx) and, when not,
// why.
func judge(resp *http.Response) (bool, string) {
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return true, ""
	case c >= 300 && c < 400:
		return false, fmt.Sprintf("endpoint answered %s (redirects are not followed), want 2xx", resp.Status)
	default:
		return false, fmt.Sprintf("endpoint answered %s, want 2xx", resp.Status)
	}
}

// transportError describes a request that got no HTTP answer, without the
// URL (the endpoint is known) and never with the secret or the body.
func (r *Relay) transportError(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s (timeout)", r.cfg.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return "no answer: " + err.Error()
}

// schedule returns when a delivery is attempted again after an attempt of
// d that ended at end: nil when delivered; nil and gaveUp once window has
// passed since d.CreatedAt; else end+delay, but no later than the window's
// end, so the last attempt comes when the window closes.
func schedule(d Delivery, delivered bool, end time.Time, window, delay time.Duration) (next *time.Time, gaveUp bool) {
	if delivered {
		return nil, false
	}
	deadline := d.CreatedAt.Add(window)
	if !end.Before(deadline) {
		return nil, true
	}
	at := end.Add(delay)
	if at.After(deadline) {
		at = deadline
	}
	return &at, false
}

// Backoff returns the delay after a delivery's failures-th failed attempt:
// BackoffBase doubled per failure after the first, capped at BackoffMax,
// less a random jitter of up to a quarter so endpoints recovering from one
// outage are not hit by every retry at once. Delays never shrink from one
// failure to the next below the cap, since each range starts above the
// previous one's end.
func Backoff(failures int) time.Duration {
	return backoff(failures, rand.Float64()) //nolint:gosec // jitter needs no cryptographic randomness
}

// backoff is Backoff with the jitter fraction j in [0, 1) given.
func backoff(failures int, j float64) time.Duration {
	d := BackoffBase
	for i := 1; i < failures && d < BackoffMax; i++ {
		d *= 2
	}
	d = min(d, BackoffMax)
	return d - time.Duration(float64(d/4)*j)
}
