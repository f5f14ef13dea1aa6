package config

import (
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
)

// TestLogValueHidesSecrets logs a configuration holding every secret the
// api-server reads through slog and checks that none of their values
// appears, while the settings around them do.
func TestLogValueHidesSecrets(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	vaultKey := base64.StdEncoding.EncodeToString(key)
	env := map[string]string{
		"MANGO_DATABASE_URL":               "postgres://mango:db-password-1@db.internal:5432/mango?sslmode=require&password=db-password-2",
		"MANGO_API_KEY":                    "api-key-secret-0123456789",
		"MANGO_WORKER_TOKEN":               "worker-token-secret",
		"MANGO_VAULT_KEYS":                 "k1:" + vaultKey,
		"MANGO_FILES_S3_ENDPOINT":          "http://127.0.0.1:9000",
		"MANGO_FILES_S3_BUCKET":            "files",
		"MANGO_FILES_S3_ACCESS_KEY_ID":     "s3-access-key",
		"MANGO_FILES_S3_SECRET_ACCESS_KEY": "s3-secret-key",
	}
	c, err := Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("Load = %v, want no error", err)
	}
	for _, format := range []string{"json", "text"} {
		var buf strings.Builder
		var h slog.Handler = slog.NewJSONHandler(&buf, nil)
		if format == "text" {
			h = slog.NewTextHandler(&buf, nil)
		}
		slog.New(h).Info("config", "config", c)
		out := buf.String()
		for _, secret := range []string{"db-password-1", "db-password-2", "api-key-secret", "worker-token-secret", vaultKey, "s3-secret-key"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s log %s contains the secret %q, want it left out", format, out, secret)
			}
		}
		for _, want := range []string{"db.internal:5432/mango", "api_key_set", "worker_token_set", "k1", "127.0.0.1:8080", "files"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s log %s does not contain %q, want the setting logged", format, out, want)
			}
		}
	}
}

// TestLoadReportsAVariableOnce: a value that does not parse is reported
// once, with its message, not also by the range check of its setting.
func TestLoadReportsAVariableOnce(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"MANGO_STREAM_PING_INTERVAL": `MANGO_STREAM_PING_INTERVAL: must be a positive duration such as 30s, got "soon"`,
		"MANGO_MAX_BODY_BYTES":       `MANGO_MAX_BODY_BYTES: must be a number of bytes, got "soon"`,
		"MANGO_TEMPORAL_TLS":         `MANGO_TEMPORAL_TLS: must be a boolean (1, true, 0, false), got "soon"`,
	} {
		env := map[string]string{"MANGO_DATABASE_URL": "postgres://u@127.0.0.1:5432/mango", name: "soon"}
		_, err := Load(func(k string) string { return env[k] })
		if err == nil || err.Error() != want {
			t.Errorf("%s=soon: error %v, want exactly %q", name, err, want)
		}
	}
}
