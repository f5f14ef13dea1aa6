// Package proto is the home of Mango's protobuf contracts.
//
// It is the only contract between the two services: the api-server and the
// execution workers exchange only the messages and services defined here
// and the Session Workflow's names (sessionwf). Sources live in
// mango/<area>/v1/*.proto and are managed with buf (buf.yaml: lint
// STANDARD, breaking FILE); the generated Go code under gen/
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
//
// Code both services share that is not the contract (TLS configuration,
// the network guard, build info, pprof, test servers and helpers) lives in
// the internal module at the repository root.
package proto
