//go:build !linux

package wire

import "syscall"

// setUserTimeout: only Linux has TCP_USER_TIMEOUT; elsewhere keepalive
// alone notices a silent peer.
func setUserTimeout(syscall.RawConn, int) error { return nil }
