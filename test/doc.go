// Package test holds Atoll's multi-server tests: real storage servers on
// 127.0.0.1 (in-process, or child processes of a freshly built atoll binary
// where a test must kill -9 one), driven through the client library and the
// raw storage protocol. Every test asserts on bytes and errors.
package test
