package wire

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on a socket being dialed: data
// (or keepalive probes) left unacknowledged that long closes the
// connection, where Linux would otherwise retransmit for many minutes.
func setUserTimeout(rc syscall.RawConn, ms int) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
	}); err != nil {
		return err
	}
	return serr
}
