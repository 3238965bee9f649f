package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// The file CLI verbs: they talk to the cluster through the client library,
// as root with an admin key and as the invoking user otherwise (cliCred).
// Paths inside Atoll are absolute ("/dir/file"); in `cp`, a path
// prefixed with "atoll:" is inside Atoll, anything else is local.

func dialFS(cmd *cobra.Command, g *globalFlags, addr string) (*connect.Conn, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	key, err := g.key()
	if err != nil {
		return nil, err
	}
	return connect.Dial(cmd.Context(), clusterAddrs(addr), key, log)
}

// resolveDir is the inode of directory path, looked up as root (a flag
// naming a directory of the namespace: flag says which, for the error).
func resolveDir(ctx context.Context, fs *client.FS, flag, path string) (uint64, error) {
	at, err := fs.Resolve(ctx, metawire.Root, path)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s %s: %w", flag, path, err)
	case !at.IsDir():
		return 0, usageErr(flag, fmt.Errorf("%s is not a directory", path))
	}
	return at.Ino, nil
}

// cliCred is who the file commands act as: root for an admin key (the
// operator's), else the invoking user, whom the islands then hold to
// POSIX permissions (and a scoped key to its scope).
func cliCred(g *globalFlags) metawire.Cred {
	if k, err := g.key(); err == nil && k.Caps.Has(auth.CapAdmin) {
		return metawire.Root
	}
	c := metawire.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	return c
}

func newLsCmd(g *globalFlags) *cobra.Command {
	var addr string
	var long bool
	cmd := &cobra.Command{
		Use:   "ls [-l] [PATH]",
		Short: "List a directory in Atoll",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			ctx, cred := cmd.Context(), cliCred(g)
			a, err := c.FS.Resolve(ctx, cred, p)
			if err != nil {
				return err
			}
			if !a.IsDir() {
				printEntry(os.Stdout, p, a, long)
				return nil
			}
			var ents []metawire.Dirent
			for cookie := uint64(0); ; {
				r, err := c.FS.Readdir(ctx, cred, a.Ino, cookie, 512, long)
				if err != nil {
					return err
				}
				for _, e := range r.Entries {
					cookie = e.Cookie
					if e.Name != "." && e.Name != ".." {
						ents = append(ents, e)
					}
				}
				if r.EOF || len(r.Entries) == 0 {
					break
				}
			}
			sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, e := range ents {
				if long {
					printEntry(tw, e.Name, e.Attr, true)
				} else {
					suffix := ""
					if e.Type == metawire.ModeDir {
						suffix = "/"
					}
					fmt.Fprintln(tw, e.Name+suffix)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or "+defaultCluster+")")
	cmd.Flags().BoolVarP(&long, "long", "l", false, "long listing: mode, links, owner, size, mtime, policy")
	return cmd
}

func printEntry(w io.Writer, name string, a metawire.Attr, long bool) {
	if !long {
		fmt.Fprintln(w, name)
		return
	}
	pol := a.Policy
	if a.Inline {
		pol += " (inline)"
	}
	fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", os.FileMode(a.Mode&0o777)|typeBits(a.Mode), a.Nlink, a.UID, a.GID, a.Size,
		time.Unix(0, a.Mtime).Format("2006-01-02 15:04"), name, pol)
}

func typeBits(mode uint32) os.FileMode {
	switch mode & metawire.ModeType {
	case metawire.ModeDir:
		return os.ModeDir
	case metawire.ModeLink:
		return os.ModeSymlink
	case metawire.ModeFIFO:
		return os.ModeNamedPipe
	case metawire.ModeSock:
		return os.ModeSocket
	case metawire.ModeChar:
		return os.ModeDevice | os.ModeCharDevice
	case metawire.ModeBlock:
		return os.ModeDevice
	}
	return 0
}

const atollPrefix = "atoll:"

func newCpCmd(g *globalFlags) *cobra.Command {
	var addr string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: `Copy a file into or out of Atoll ("atoll:/path" names a file in Atoll)`,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			in, out := strings.HasPrefix(src, atollPrefix), strings.HasPrefix(dst, atollPrefix)
			if in == out {
				return errors.New(`cp: exactly one of SRC and DST must be an Atoll path ("atoll:/path")`)
			}
			c, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cred := cmd.Context(), cliCred(g)
			if out { // local -> atoll
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				st, err := f.Stat()
				if err != nil {
					return err
				}
				if st.Size() <= smallCopy { // a small file: one island request
					data, err := io.ReadAll(io.LimitReader(f, smallCopy+1))
					if err != nil {
						return err
					}
					return c.FS.WriteFile(ctx, cred, strings.TrimPrefix(dst, atollPrefix), data, uint32(st.Mode().Perm()))
				}
				fh, err := c.FS.CreateFile(ctx, cred, strings.TrimPrefix(dst, atollPrefix), uint32(st.Mode().Perm()))
				if err != nil {
					return err
				}
				bar := newBar(st.Size(), "copying in", quiet)
				if err := copyInto(ctx, fh, io.TeeReader(f, bar)); err != nil {
					return err
				}
				return fh.Close(ctx)
			}
			fh, err := c.FS.OpenPath(ctx, cred, strings.TrimPrefix(src, atollPrefix))
			if err != nil {
				return err
			}
			f, err := os.Create(dst)
			if err != nil {
				return err
			}
			bar := newBar(int64(fh.Size()), "copying out", quiet)
			if _, err := io.CopyBuffer(io.MultiWriter(f, bar), fh.Reader(ctx), make([]byte, 4<<20)); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or "+defaultCluster+")")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// smallCopy is the largest source that cp reads whole and writes with
// one FS.WriteFile (which sends a file of up to the inline maximum with
// its create).
const smallCopy = 64 << 10

// newBar is a progress bar on standard error for copies of 8 MiB and
// more, when standard error is a terminal (its carriage returns landed in
// log files otherwise).
func newBar(n int64, what string, quiet bool) io.Writer {
	if quiet || n < 8<<20 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return io.Discard
	}
	return progressbar.DefaultBytes(n, what)
}

func copyInto(ctx context.Context, fh interface {
	WriteAt(context.Context, []byte, int64) (int, error)
}, r io.Reader) error {
	buf := make([]byte, 4<<20)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if _, werr := fh.WriteAt(ctx, buf[:n], off); werr != nil {
				return werr
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func newPolicyCmd(g *globalFlags) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "policy get PATH | policy set PATH POLICY",
		Short: "Show or set a file's or directory's redundancy policy (none, mirror:R, ec:K+M)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb, p := args[0], args[1]
			if (verb == "get" && len(args) != 2) || (verb == "set" && len(args) != 3) || (verb != "get" && verb != "set") {
				return errors.New("usage: atoll policy get PATH | atoll policy set PATH POLICY")
			}
			c, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cred := cmd.Context(), cliCred(g)
			a, err := c.FS.Resolve(ctx, cred, p)
			if err != nil {
				return err
			}
			if verb == "get" {
				pol := a.Policy
				if pol == "" {
					pol = c.View.DefaultPolicy() + " (cluster default)"
				}
				fmt.Println(pol)
				return nil
			}
			pol, err := layout.Parse(args[2])
			if err != nil {
				return err
			}
			if err := pol.Validate(len(c.View.Map().Storage)); err != nil {
				return err
			}
			if err := c.FS.SetXattr(ctx, cred, a.Ino, "user.atoll.policy", []byte(pol.String()), 0); err != nil {
				return err
			}
			before := a.Policy
			if before == "" {
				before = c.View.DefaultPolicy() + " (cluster default)"
			}
			what := "new files and directories made in it inherit it; what it holds already keeps its own"
			if !a.IsDir() {
				what = "the data it already holds is re-striped"
			}
			fmt.Printf("%s: policy %s -> %s (%s)\n", p, before, pol, what)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or "+defaultCluster+")")
	return cmd
}

func newDfCmd(g *globalFlags) *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "df [--json]",
		Short: "Show raw capacity and use of every storage server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := dialFS(cmd, g, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			type row struct {
				Slot      uint16 `json:"slot"`
				Addr      string `json:"addr"`
				State     string `json:"state"`
				Capacity  uint64 `json:"capacity_bytes"`
				Used      uint64 `json:"used_bytes"`
				Free      uint64 `json:"free_bytes"`
				Fragments uint64 `json:"fragments"`
				// SharesDiskWith is the first slot on the same file system:
				// this row's size and free space are that disk's again, and
				// the totals count them once.
				SharesDiskWith *uint16 `json:"shares_disk_with,omitempty"`
				Error          string  `json:"error,omitempty"`
			}
			var rows []row
			var total row
			firstOnDisk := map[uint64]uint16{}
			for _, s := range c.View.Map().Storage {
				r := row{Slot: s.Slot, Addr: s.Addr, State: s.State.String()}
				st, err := c.Data.ServerStats(cmd.Context(), s.Slot)
				if err != nil {
					r.Error = shortErr(err)
				} else {
					r.Capacity, r.Used, r.Free, r.Fragments = st.CapacityBytes, st.UsedBytes, st.FreeBytes, st.Fragments
					total.Used += st.UsedBytes
					total.Fragments += st.Fragments
					if first, ok := firstOnDisk[st.Disk]; ok && st.Disk != 0 {
						r.SharesDiskWith = &first
					} else {
						firstOnDisk[st.Disk] = s.Slot
						total.Capacity += st.CapacityBytes
						total.Free += st.FreeBytes
					}
				}
				rows = append(rows, r)
			}
			shared := 0
			for _, r := range rows {
				if r.SharesDiskWith != nil {
					shared++
				}
			}
			if asJSON {
				b, _ := json.Marshal(map[string]any{"servers": rows, "capacity_bytes": total.Capacity, "used_bytes": total.Used,
					"free_bytes": total.Free, "fragments": total.Fragments, "default_policy": c.View.DefaultPolicy()})
				fmt.Println(string(b))
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SLOT\tADDRESS\tSTATE\tSIZE\tUSED\tFREE\tFRAGMENTS")
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t- (%s)\n", r.Slot, r.Addr, r.State, r.Error)
					continue
				}
				note := ""
				if r.SharesDiskWith != nil {
					note = fmt.Sprintf("\t(same disk as slot %d)", *r.SharesDiskWith)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d%s\n", r.Slot, r.Addr, r.State, hsize(r.Capacity), hsize(r.Used), hsize(r.Free), r.Fragments, note)
			}
			fmt.Fprintf(tw, "total\t\t\t%s\t%s\t%s\t%d\n", hsize(total.Capacity), hsize(total.Used), hsize(total.Free), total.Fragments)
			if shared > 0 {
				fmt.Fprintf(tw, "(%d servers share a disk with another: the totals count each disk once)\n", shared)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or "+defaultCluster+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// shortErr is an error's last cause in one line: a down server's row was
// a long repeated chain.
func shortErr(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(msg, "connection refused"):
		return "unreachable: connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), strings.Contains(msg, "i/o timeout"):
		return "unreachable: timed out"
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 && len(msg) > 80 {
		msg = msg[i+2:]
	}
	return msg
}

func hsize(n uint64) string { return layout.HumanSize(n) }
