package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseConnections is where the kernel's fusectl file system lists FUSE
// connections, one directory per connection named by its device minor.
const fuseConnections = "/sys/fs/fuse/connections"

// Abort aborts the FUSE connection of the mount at mountpoint, as
// writing to /sys/fs/fuse/connections/N/abort does: every request
// waiting for the mount process fails with ENOTCONN, and so does every
// later use of the mountpoint until it is unmounted.
//
// A supervisor needs it for a mount process killed while one of its
// threads waits in the kernel: a name invalidation (FUSE notify) waits
// for its directory's lock, which a request to the same mount holds.
// The killed process never answers that request and the thread never
// gets the lock; the connection ends only when every thread has exited,
// so the process stays (a zombie) and the mountpoint hangs forever.
// Abort ends the request, the thread and the process.
//
// Abort reads /proc/self/mountinfo (it never touches the mountpoint,
// which may hang) and mounts fusectl when it is not mounted yet.
func Abort(mountpoint string) error {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return fmt.Errorf("fusefs: abort %s: %w", mountpoint, err)
	}
	minor, err := fuseMinor(abs)
	if err != nil {
		return fmt.Errorf("fusefs: abort %s: %w", abs, err)
	}
	ctl := filepath.Join(fuseConnections, minor, "abort")
	if _, err := os.Stat(ctl); errors.Is(err, os.ErrNotExist) {
		// fusectl is not mounted on every system (it is not here).
		if err := unix.Mount("fusectl", fuseConnections, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("fusefs: abort %s: mount fusectl on %s: %w", abs, fuseConnections, err)
		}
	}
	if err := os.WriteFile(ctl, []byte("1"), 0); err != nil {
		return fmt.Errorf("fusefs: abort %s: %w", abs, err)
	}
	return nil
}

// fuseMinor returns the device minor (the fusectl connection's name) of
// the FUSE mount at the absolute path mountpoint, from mountinfo: the
// last mount there, as later mounts hide earlier ones.
func fuseMinor(mountpoint string) (string, error) {
	ms, err := mountsAt(mountpoint)
	if err != nil {
		return "", err
	}
	minor := ""
	for _, m := range ms {
		if _, mi, ok := strings.Cut(m.dev, ":"); ok && strings.HasPrefix(m.fstype, "fuse") {
			minor = mi
		}
	}
	if minor == "" {
		return "", fmt.Errorf("no FUSE mount there")
	}
	return minor, nil
}
