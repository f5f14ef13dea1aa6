// Package db owns Mango's PostgreSQL schema and every query against it.
//
// Migrations are embedded and applied by [Migrate]. Queries are written in
// SQL under queries/ and compiled by sqlc into an internal package; callers
// use the exported [Store], which speaks domain types and maps driver errors
// to [ErrNotFound] and [ErrConflict]. Only the api-server imports this
// module: execution workers reach state through the ControlPlane gRPC API.
package db
