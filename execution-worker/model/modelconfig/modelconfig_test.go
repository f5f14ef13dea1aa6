package modelconfig_test

import (
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
	"github.com/mangohq/mango/execution-worker/model/modelconfig"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

func TestFromConfig(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"", "fake"} {
		c, err := modelconfig.FromConfig(kind, "", "", "", "")
		if _, ok := c.(*modelfake.Client); err != nil || !ok {
			t.Errorf("kind %q: %T, %v; want *modelfake.Client", kind, c, err)
		}
	}
	c, err := modelconfig.FromConfig("anthropic", "http://127.0.0.1:9/", "sk-secret", "bearer", "claude-x")
	if _, ok := c.(*modelanthropic.Client); err != nil || !ok {
		t.Errorf("anthropic: %T, %v; want *modelanthropic.Client", c, err)
	}
	for _, tc := range []struct{ kind, url, key, auth string }{
		{"anthropic", "", "", ""},
		{"anthropic", "", "sk-secret", "basic"},
		{"anthropic", "::", "sk-secret", ""},
		{"openai", "", "sk-secret", ""},
	} {
		_, err := modelconfig.FromConfig(tc.kind, tc.url, tc.key, tc.auth, "")
		if err == nil {
			t.Errorf("FromConfig(%q, %q, key, %q): no error", tc.kind, tc.url, tc.auth)
		} else if strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("error %q contains the API key", err)
		}
	}
}
