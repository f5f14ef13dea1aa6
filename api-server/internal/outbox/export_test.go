package outbox

// Running reports whether Run has started its direct-delivery goroutines,
// so that Wake queues instead of delivering synchronously: tests wait for
// it instead of sleeping.
func (r *Relay) Running() bool { return r.running.Load() }
