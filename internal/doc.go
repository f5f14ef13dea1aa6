// Package internal is the root of the module that holds code both
// services use and that is not the wire contract (the contract and its
// generated code live in the proto module). Its packages are importable
// only by Mango's own modules, and import neither service nor db
// (package deptest checks it).
//
// The packages are:
//
//   - tlsconf (+ tlsconftest): *tls.Config for the ControlPlane and
//     Temporal connections from PEM files, reloaded on rotation.
//   - netguard: the private-network guard both services apply to
//     client-configured endpoints (MCP servers, OAuth token endpoints).
//   - buildinfo: the version and commit stamped into both binaries.
//   - pprofserve: the opt-in pprof listener of both binaries.
//   - temporalclient: the Temporal client options both binaries dial with.
//   - sniff: media types from magic bytes (images, PDF).
//
// and, for tests only:
//
//   - mcptest: MCP servers on 127.0.0.1 (Streamable HTTP, HTTP+SSE, OAuth).
//   - temporaltest: the shared test Temporal server or a private dev server.
//   - testenv: skip, or fail with MANGO_REQUIRE_SERVICES=1, when a service
//     a test needs is missing.
//   - testbin: a service binary built once per test process.
//   - deptest: the import-graph rules of every Mango module.
package internal
