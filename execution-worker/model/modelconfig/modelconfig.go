// Package modelconfig builds the worker's model client from its
// configuration (MANGO_MODEL, MANGO_MODEL_BASE_URL, MANGO_MODEL_API_KEY,
// MANGO_MODEL_AUTH, MANGO_MODEL_ID).
package modelconfig

import (
	"fmt"
	"os"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// Model client kinds accepted by FromConfig.
const (
	KindFake      = "fake"
	KindAnthropic = "anthropic"
)

// FromConfig returns the model client of kind: the offline fake for "fake"
// (or ""), which ignores the other arguments, or the Messages API client
// for "anthropic". An empty baseURL or auth takes the modelanthropic
// default; an empty modelID keeps the model each request names. Errors
// never contain apiKey.
func FromConfig(kind, baseURL, apiKey, auth, modelID string) (model.Client, error) {
	switch kind {
	case "", KindFake:
		c := modelfake.New()
		if path := os.Getenv(modelfake.RecordEnv); path != "" {
			c.RecordTo(path)
		}
		return c, nil
	case KindAnthropic:
		c, err := modelanthropic.New(modelanthropic.Config{
			BaseURL: baseURL,
			APIKey:  apiKey,
			Auth:    auth,
			Model:   modelID,
		})
		if err != nil {
			return nil, fmt.Errorf("model client: %w", err)
		}
		return c, nil
	default:
		return nil, fmt.Errorf("model client: unknown kind %q: want %q or %q", kind, KindFake, KindAnthropic)
	}
}
