// Package fragment defines the names of fragments and stripes and the
// storage-server RPC messages exchanged over internal/wire. It is shared by
// the storage server and the client so that neither imports the other.
package fragment
