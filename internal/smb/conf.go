package smb

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
)

// layout names the files a gateway keeps under its Config.Dir.
type layout struct{ dir string }

func (l layout) mnt() string           { return filepath.Join(l.dir, "mnt") }
func (l layout) samba(s string) string { return filepath.Join(l.dir, "samba", s) }
func (l layout) conf() string          { return filepath.Join(l.dir, "smb.conf") }
func (l layout) passwd() string        { return filepath.Join(l.dir, "nss", "passwd") }
func (l layout) group() string         { return filepath.Join(l.dir, "nss", "group") }
func (l layout) smbpasswd() string     { return filepath.Join(l.dir, "nss", "import.smbpasswd") }

var sambaDirs = []string{"private", "lock", "state", "cache", "pid", "ncalrpc", "log"}

// renderConf is the smb.conf of a gateway. What it turns off, and why,
// is in the package doc ("What holds across gateways").
func renderConf(cfg *Config, l layout) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("smb: --listen %q: %w", cfg.Listen, err)
	}
	path := filepath.Join(l.mnt(), filepath.FromSlash(strings.TrimPrefix(cfg.Path, "/")))
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "  %s = %s\n", k, v) }
	b.WriteString("# Written by atoll smb at every start; edits are lost.\n[global]\n")
	line("server role", "standalone server")
	line("smb ports", port)
	line("interfaces", host)
	line("bind interfaces only", "yes")
	for _, d := range sambaDirs[:6] {
		key := d + " directory"
		switch d {
		case "private":
			key = "private dir"
		case "ncalrpc":
			key = "ncalrpc dir"
		}
		line(key, l.samba(d))
	}
	line("passdb backend", "tdbsam:"+filepath.Join(l.samba("private"), "passdb.tdb"))
	line("log file", filepath.Join(l.samba("log"), "smbd.%m"))
	line("max log size", "10000")
	line("server min protocol", "SMB2_10")
	line("ntlm auth", "ntlmv2-only")
	line("map to guest", "never")
	line("restrict anonymous", "2")
	line("load printers", "no")
	line("printing", "bsd")
	line("printcap name", "/dev/null")
	line("disable spoolss", "yes")
	line("disable netbios", "yes")
	// Coherence across gateways and with other hosts: byte-range locks
	// go to the mount's fcntl locks, which are the islands' (posix
	// locking); oplocks and leases are promises one smbd cannot keep for
	// changes made through another gateway or host, so none are given.
	line("oplocks", "no")
	line("level2 oplocks", "no")
	line("kernel oplocks", "no")
	line("smb2 leases", "no")
	line("posix locking", "yes")
	line("strict locking", "auto")
	line("kernel share modes", "no")
	fmt.Fprintf(&b, "[%s]\n", cfg.Share)
	line("path", path)
	line("read only", "no")
	line("guest ok", "no")
	if cfg.CaseSensitive {
		line("case sensitive", "yes")
	}
	line("ea support", "yes")
	line("store dos attributes", "yes")
	line("vfs objects", "catia fruit streams_xattr")
	line("fruit:metadata", "stream")
	// The cluster's users file is root's; no client needs to see it.
	line("veto files", "/"+strings.TrimPrefix(UsersDir, "/")+"/")
	// Samba's default create mask (0744) stays: a narrower one made
	// smbtorture's opens fail on ext4 too (smb2.connect, smb2.lock).
	return b.String(), nil
}
