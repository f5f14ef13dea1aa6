// Package ids mints and checks the public identifiers of Mango resources:
// a type prefix followed by 24 base62 characters. The first six characters
// encode the creation time, so identifiers of one kind sort roughly by age;
// the rest are random.
package ids

import (
	"crypto/rand"
	"math/big"
	"strings"
	"time"
)

// Prefixes of public identifiers.
const (
	Agent        = "agent_"
	Environment  = "env_"
	Session      = "sesn_"
	Event        = "sevt_"
	Work         = "work_"
	EnvKey       = "envkey_"
	Request      = "req_"
	APIKey       = "key_"
	File         = "file_"
	Resource     = "sesrsc_"
	Vault        = "vlt_"
	Credential   = "vcrd_"
	Skill        = "skill_"
	SkillVersion = "skillver_"
	// MemoryStore, Memory and MemoryVersion: memory ids and version ids
	// are minted by package db (db.MemoryIDPrefix and
	// db.MemoryVersionIDPrefix), in the same form.
	MemoryStore   = "memstore_"
	Memory        = "mem_"
	MemoryVersion = "memver_"
	// Dream is the SDK's dream id prefix (drm_...).
	Dream = "drm_"
	// Outcome identifies an outcome a user.define_outcome event defines.
	Outcome = "outc_"
	// WebhookEndpoint identifies a webhook endpoint.
	WebhookEndpoint = "whep_"
	// Deployment and DeploymentRun identify a deployment and one of its
	// runs (the SDK documents drun_...).
	Deployment    = "depl_"
	DeploymentRun = "drun_"
)

const (
	alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	bodyLen  = 24
	timeLen  = 6
)

// New returns a fresh identifier with the given prefix.
func New(prefix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + bodyLen)
	b.WriteString(prefix)
	// Seconds since the epoch in six base62 digits (good until year 3800).
	t := time.Now().Unix()
	var ts [timeLen]byte
	for i := timeLen - 1; i >= 0; i-- {
		ts[i] = alphabet[t%62]
		t /= 62
	}
	b.Write(ts[:])
	max := big.NewInt(62)
	for range bodyLen - timeLen {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			panic("ids: crypto/rand failed: " + err.Error())
		}
		b.WriteByte(alphabet[n.Int64()])
	}
	return b.String()
}

// Valid reports whether id is well-formed for prefix. Handlers answer 404
// for malformed identifiers without touching the database.
func Valid(prefix, id string) bool {
	body, ok := strings.CutPrefix(id, prefix)
	if !ok || len(body) != bodyLen {
		return false
	}
	for i := 0; i < len(body); i++ {
		if strings.IndexByte(alphabet, body[i]) < 0 {
			return false
		}
	}
	return true
}
