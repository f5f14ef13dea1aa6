// Package internal is the root of the module that holds code both
// services use and that is not the wire contract (the contract and its
// generated code live in the proto module). Its packages are importable
// only by Mango's own modules.
package internal
