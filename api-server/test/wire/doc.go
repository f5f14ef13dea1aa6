// Package wire holds the SDK wire tests: the official Anthropic Go SDK
// (github.com/anthropics/anthropic-sdk-go/v2) driving a real api-server on
// a real PostgreSQL database. They are the proof that Mango speaks the
// Managed Agents API as the SDK expects it.
package wire
