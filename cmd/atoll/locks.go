package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/filelock"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// `atoll locks`: the file locks the islands hold (every client's), and
// an operator's way to break a dead client's lock session before its
// term runs out.

func newLocksCmd(g *globalFlags) *cobra.Command {
	var addr, endSession string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "locks PATH... | --end-session SESSION",
		Short: "List the file locks held and waited for on files, or end a dead client's lock session",
		Long: `List every lock held on each PATH, and every request waiting for one, as the
file's island holds them (locks taken through any mount): kind
(posix: fcntl and OFD byte ranges; flock: whole file), type (read or
write), byte range (inclusive; EOF: to the end of the file and beyond), the
owner's lock session (hex) and owner id inside it, and the process id.

--end-session SESSION ends lock session SESSION (hex, as listed) at every
island: every lock it holds is released now. A client's session also ends
by itself when the client has not renewed it for a term (atoll meta
--lock-term, 30s by default); use --end-session for a client known dead
that should not be waited for. The client, if it still runs, loses its
locks: its writes to the files it had locked fail until it locks them again
or closes them.
Needs a key with the admin capability.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if endSession != "" {
				if len(args) > 0 {
					return errors.New("locks: --end-session takes no PATH")
				}
				s, err := parseSession(endSession)
				if err != nil {
					return err
				}
				key, err := g.key()
				if err != nil {
					return err
				}
				// The islands refuse it too (OpLockEnd needs admin); say so
				// before connecting, in the islands' words.
				if err := (auth.Peer{Name: key.Name, Caps: key.Caps}).Allow(auth.CapAdmin, "atoll locks --end-session"); err != nil {
					return err
				}
				c, err := dialFS(cmd, g, addr)
				if err != nil {
					return err
				}
				defer c.Close()
				n, err := c.FS.EndLockSession(cmd.Context(), s)
				writeEndSession(cmd.OutOrStdout(), s, n, err, asJSON)
				if err != nil {
					return fmt.Errorf("locks: ending session %016x: %w", s, err)
				}
				return nil
			}
			if len(args) == 0 {
				return errors.New("usage: atoll locks PATH... | atoll locks --end-session SESSION")
			}
			c, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			files := listLocks(cmd.Context(), c.FS, args)
			if asJSON {
				err = writeLocksJSON(cmd.OutOrStdout(), files)
			} else {
				err = writeLocks(cmd.OutOrStdout(), files)
			}
			if err != nil {
				return err
			}
			failed := 0
			for _, f := range files {
				if f.Error != "" {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("locks: %d of %d paths could not be listed", failed, len(files))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or "+defaultCluster+")")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&endSession, "end-session", "", "end lock session `SESSION` (hex) at every island, releasing its locks (admin key)")
	return cmd
}

// parseSession reads a lock session as listed: hex, 0x allowed.
func parseSession(s string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("locks: --end-session %q: want a lock session in hex, as `atoll locks` lists it", s)
	}
	return v, nil
}

// lockJSON is one lock held or waited for.
type lockJSON struct {
	Kind  string `json:"kind"` // posix, flock
	Type  string `json:"type"` // read, write
	Start uint64 `json:"start"`
	// End is inclusive; null: to the end of the file and beyond.
	End   *uint64 `json:"end"`
	Range string  `json:"range"` // "START-END", END "EOF" for null
	// Session and Owner are hex (64-bit values JSON numbers would round).
	Session string `json:"session"`
	Owner   string `json:"owner"`
	Pid     uint32 `json:"pid"`
}

// fileLocksJSON is one PATH's locks.
type fileLocksJSON struct {
	Path    string     `json:"path"`
	Ino     string     `json:"ino,omitempty"` // hex
	Held    []lockJSON `json:"held"`
	Waiting []lockJSON `json:"waiting"`
	// OpenBy are the lock sessions holding the file open (their
	// clients keep it after its last name goes).
	OpenBy []string `json:"open_by"`
	Error  string   `json:"error,omitempty"`
}

// listLocks asks each path's island for its locks; a path that fails
// carries its error.
func listLocks(ctx context.Context, fs *client.FS, paths []string) []fileLocksJSON {
	cred := metawire.Root
	var out []fileLocksJSON
	for _, p := range paths {
		fl := fileLocksJSON{Path: p, Held: []lockJSON{}, Waiting: []lockJSON{}, OpenBy: []string{}}
		a, err := fs.Resolve(ctx, cred, p)
		if err == nil {
			fl.Ino = fmt.Sprintf("%x", a.Ino)
			var ll client.LockList
			ll, err = fs.ListLocks(ctx, cred, a.Ino)
			for _, l := range ll.Held {
				fl.Held = append(fl.Held, lockView(l))
			}
			for _, l := range ll.Waiting {
				fl.Waiting = append(fl.Waiting, lockView(l))
			}
			for _, s := range ll.OpenBy {
				fl.OpenBy = append(fl.OpenBy, fmt.Sprintf("%016x", s))
			}
		}
		if err != nil {
			fl.Error = err.Error()
		}
		out = append(out, fl)
	}
	return out
}

func lockView(l filelock.Lock) lockJSON {
	v := lockJSON{Kind: kindName(l.Kind), Type: typeName(l.Type), Start: l.Start,
		Session: fmt.Sprintf("%016x", l.Owner.Session), Owner: fmt.Sprintf("%016x", l.Owner.ID), Pid: l.Pid}
	end := "EOF"
	if l.End != filelock.MaxEnd {
		e := l.End
		v.End = &e
		end = strconv.FormatUint(e, 10)
	}
	v.Range = fmt.Sprintf("%d-%s", l.Start, end)
	return v
}

func kindName(k filelock.Kind) string { return k.String() }

func typeName(t filelock.Type) string {
	switch t {
	case filelock.Read:
		return "read"
	case filelock.Write:
		return "write"
	}
	return fmt.Sprintf("type%d", t)
}

func writeLocksJSON(w io.Writer, files []fileLocksJSON) error {
	if files == nil {
		files = []fileLocksJSON{}
	}
	b, err := json.Marshal(map[string]any{"files": files})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func writeLocks(w io.Writer, files []fileLocksJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSTATE\tKIND\tTYPE\tRANGE\tSESSION\tOWNER\tPID")
	for _, f := range files {
		switch {
		case f.Error != "":
			fmt.Fprintf(tw, "%s\terror: %s\n", f.Path, f.Error)
			continue
		case len(f.Held) == 0 && len(f.Waiting) == 0 && len(f.OpenBy) == 0:
			fmt.Fprintf(tw, "%s\tunlocked\n", f.Path)
			continue
		}
		for _, s := range f.OpenBy {
			fmt.Fprintf(tw, "%s\topen\t-\t-\t-\t%s\t-\t-\n", f.Path, s)
		}
		for _, s := range []struct {
			state string
			locks []lockJSON
		}{{"held", f.Held}, {"waiting", f.Waiting}} {
			for _, l := range s.locks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", f.Path, s.state, l.Kind, l.Type, l.Range, l.Session, l.Owner, l.Pid)
			}
		}
	}
	return tw.Flush()
}

// writeEndSession prints what --end-session released (also when some
// islands failed: what the others released is released).
func writeEndSession(w io.Writer, s uint64, released int, err error, asJSON bool) {
	if asJSON {
		out := map[string]any{"session": fmt.Sprintf("%016x", s), "released": released}
		if err != nil {
			out["error"] = err.Error()
		}
		b, _ := json.Marshal(out)
		fmt.Fprintln(w, string(b))
		return
	}
	if err != nil {
		fmt.Fprintf(w, "lock session %016x: %d locks released at the islands that answered\n", s, released)
		return
	}
	fmt.Fprintf(w, "lock session %016x ended: %d locks released\n", s, released)
}
