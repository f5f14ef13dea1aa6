// Package proto is the home of Mango's protobuf contracts.
//
// It is the only contract between the two services: the api-server and the
// execution workers share no Go code, only the messages and services defined
// here. Sources live in mango/<area>/v1/*.proto and are managed with buf
// (buf.yaml: lint STANDARD, breaking FILE); the generated Go code under gen/
// is committed, so importing this module needs no code generation. After
// editing a .proto file, run from this directory:
//
//	../bin/buf lint
//	../bin/buf generate
//
// and commit the .proto and the regenerated gen/ together.
//
// The Go packages are:
//
//   - gen/mango/controlplane/v1 (controlplanev1): the ControlPlane gRPC
//     service the api-server serves and workers call.
//   - gen/mango/session/v1 (sessionv1): the Session Workflow's input and
//     signal payloads.
//   - sessionwf (hand-written): the Session Workflow's type, signal name,
//     workflow id and task queue names.
//   - tlsconf (hand-written): *tls.Config for the ControlPlane and Temporal
//     connections from PEM files, with certificates reloaded on rotation.
//   - netguard (hand-written): the private-network guard both services
//     apply to client-configured endpoints (MCP servers, OAuth token
//     endpoints), so the rule is one piece of code.
//   - mcptest (hand-written, tests only): MCP servers on 127.0.0.1 built
//     with the official MCP Go SDK (Streamable HTTP, the older HTTP+SSE
//     transport, and one behind OAuth with a token endpoint that rotates
//     refresh tokens), used by both services' tests.
package proto
