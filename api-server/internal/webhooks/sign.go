// Package webhooks signs webhook notifications per Standard Webhooks
// (https://www.standardwebhooks.com, the scheme the Anthropic SDK's
// Beta.Webhooks.Unwrap verifies) and delivers them to client endpoints at
// least once: Relay claims due deliveries from a Store, POSTs each signed
// body with its own timeout, and records every attempt's outcome with the
// next attempt time (capped exponential backoff with jitter) or the end of
// the retry window.
//
// A delivery's webhook-id is its event id on every attempt, so receivers
// deduplicate the repeats that at-least-once delivery implies.
package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every signing secret; the rest is the base64
// (standard encoding) of the HMAC key.
const SecretPrefix = "whsec_"

// secretBytes is the length of the key NewSecret generates.
const secretBytes = 32

// Header names of Standard Webhooks, as the SDK reads them.
const (
	// HeaderID carries the message id: the event id, the same on every
	// attempt.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the signing time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries "v1," and the base64 HMAC-SHA256 signature.
	HeaderSignature = "webhook-signature"
)

// UserAgent is the User-Agent of every delivery.
const UserAgent = "mango-webhooks/1"

// ErrMalformedSecret is wrapped by Sign and Headers when the secret is not
// "whsec_" followed by a non-empty standard base64 key. Its messages never
// contain the secret.
var ErrMalformedSecret = errors.New("malformed webhook secret")

// NewSecret returns a new signing secret: "whsec_" followed by the standard
// base64 encoding of 32 random bytes.
func NewSecret() (string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generate webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// decodeSecret returns the HMAC key of secret.
func decodeSecret(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: want the prefix %q", ErrMalformedSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		// The base64 error names a byte offset, never the secret's text.
		return nil, fmt.Errorf("%w: want standard base64 after %q: %w", ErrMalformedSecret, SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: want a non-empty key after %q", ErrMalformedSecret, SecretPrefix)
	}
	return key, nil
}

// Sign returns the Standard Webhooks v1 signature of body sent as message
// msgID at ts: "v1," followed by the standard base64 of
// HMAC-SHA256(key, msgID + "." + Unix seconds of ts + "." + body), where key
// is the decoded part of secret after "whsec_". The error wraps
// ErrMalformedSecret when secret is not of that form.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Headers returns the headers of a delivery of body as message msgID signed
// at ts: webhook-id, webhook-timestamp and webhook-signature, with
// Content-Type application/json and User-Agent mango-webhooks/1. The error
// wraps ErrMalformedSecret when secret is malformed.
func Headers(secret, msgID string, ts time.Time, body []byte) (http.Header, error) {
	sig, err := Sign(secret, msgID, ts, body)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, 5)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", UserAgent)
	return h, nil
}
