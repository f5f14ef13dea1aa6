package sessionwf

import (
	"crypto/sha256"
	"math/big"
)

// EventIDPrefix is the prefix of public event identifiers.
const EventIDPrefix = "sevt_"

const (
	eventIDAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	eventIDBodyLen  = 24
)

// EventID returns the public id of the event a worker appends to session
// sessionID under the idempotency key key: "sevt_" followed by 24 base62
// characters derived from SHA-256(sessionID + "\x00" + key). The api-server
// stores worker events under this id, and a worker computes the same id for
// the previews of an event before it is committed, so clients can match an
// event_start / event_delta with the complete event. Keys are unique within
// a session, so the ids are too (24 base62 characters carry ~142 bits).
func EventID(sessionID, key string) string {
	sum := sha256.Sum256([]byte(sessionID + "\x00" + key))
	n := new(big.Int).SetBytes(sum[:])
	base := big.NewInt(int64(len(eventIDAlphabet)))
	var body [eventIDBodyLen]byte
	mod := new(big.Int)
	for i := eventIDBodyLen - 1; i >= 0; i-- {
		n.DivMod(n, base, mod)
		body[i] = eventIDAlphabet[mod.Int64()]
	}
	return EventIDPrefix + string(body[:])
}
