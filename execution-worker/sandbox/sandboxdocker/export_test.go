package sandboxdocker

import (
	"context"
	"time"
)

// WithWarmTiming returns cfg with the warm pool's claim lease and refill
// interval set.
func WithWarmTiming(cfg Config, lease, every time.Duration) Config {
	cfg.warmLease, cfg.warmEvery = lease, every
	return cfg
}

// WarmKey is the LabelWarm value of p's warm containers.
func (p *Provider) WarmKey() string { return p.pool.key }

// ClaimWarm is an adoption's first step: it claims the ready warm
// container id.
func (p *Provider) ClaimWarm(ctx context.Context, id string) error {
	return p.pool.claim(ctx, warmRef{id: id})
}

// BindWarm is an adoption's second step: it renames the claimed warm
// container (id, named warmName) to name.
func (p *Provider) BindWarm(ctx context.Context, id, warmName, name string) (bool, error) {
	return p.pool.bind(ctx, warmRef{id: id, name: warmName}, name)
}
