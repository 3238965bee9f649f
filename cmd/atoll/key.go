package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func newKeyCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make and inspect keys: the cluster key, and keys with capabilities for mounts, gateways and users",
		Long: `Every connection to an Atoll server authenticates with a key.

The cluster key is made once per cluster (atoll key init; atoll dev makes its
own) and held by every manager, storage server and island, and by admins.
Other keys are derived from it with a name and capabilities:

  read    read names, attributes and data
  write   change them, acting for the users whose uid/gid the client asserts
  user    read,write: what a FUSE mount or an NFS gateway needs
  admin   drain, clean, fsck, set the table or the default policy

A key other than admin may be limited to identities (--uids, --gids): it
acts only as those users and groups, root squashed to nobody unless uid 0
is listed. An unlimited read,write key acts for any uid its client asserts,
as an NFS client does: give it to machines whose root you trust, and
tenants limited keys. atoll key revoke NAME refuses every key made so far
under NAME, within a heartbeat, on every server; the next atoll key new
--name NAME makes one of the next generation.

Key files are one line, mode 0600; $ATOLL_KEY may hold the line itself.`,
	}
	var out string
	initCmd := &cobra.Command{
		Use:   "init --out FILE",
		Short: "Make a new cluster key (once, when the cluster is created)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageErr("--out", errors.New("required"))
			}
			if _, err := os.Stat(out); err == nil {
				return fmt.Errorf("%s exists: a new cluster key would lock every role and client out of the cluster that uses it", out)
			}
			k, err := auth.NewClusterKey()
			if err != nil {
				return err
			}
			if err := auth.Save(out, k); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster key written to %s (mode 0600): copy it to every manager, storage and island machine\n", out)
			return nil
		},
	}
	initCmd.Flags().StringVar(&out, "out", "", "file to write (refused if it exists)")
	var name, caps, newOut, uids, gids, addr, path, protocols string
	var readOnly bool
	var gen int64
	newCmd := &cobra.Command{
		Use:   "new --name NAME [--caps CAPS | --read-only] [--uids 1000,...] [--gids 1000,...] [--path DIR] [--protocols mount,nfs,smb] --out FILE",
		Short: "Derive a key with capabilities from the cluster key (--key, $ATOLL_KEY or ~/.config/atoll/admin.key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := auth.ParseCaps(caps)
			if err != nil {
				return usageErr("--caps", err)
			}
			if readOnly {
				c = auth.CapRead
			}
			var sc auth.Scope
			if sc.UIDs, err = auth.ParseIDList(uids); err != nil {
				return usageErr("--uids", err)
			}
			if sc.GIDs, err = auth.ParseIDList(gids); err != nil {
				return usageErr("--gids", err)
			}
			if sc.Protocols, err = auth.ParseProtocols(protocols); err != nil {
				return usageErr("--protocols", err)
			}
			ck, err := g.key()
			if err != nil {
				return err
			}
			// The generation after the name's last revocation, when a
			// cluster is named (keys are also made before any runs).
			switch {
			case gen > math.MaxUint32:
				return usageErr("--gen", fmt.Errorf("%d is above %d", gen, uint32(math.MaxUint32)))
			case gen >= 0:
				sc.Gen = uint32(gen)
			case addr == "" && os.Getenv("ATOLL_CLUSTER") == "":
				fmt.Fprintf(cmd.ErrOrStderr(), "atoll: no --cluster given: key %q gets generation 0 (if the name was ever revoked, pass --cluster to get its next generation)\n", name)
			default:
				m, err := mapWithin(cmd.Context(), g, addr, 10*time.Second)
				if err != nil {
					return fmt.Errorf("key new: reading the cluster's revocations: %w (pass --gen N to choose the generation yourself)", err)
				}
				sc.Gen = m.Revocations()[name]
			}
			if path != "" {
				// The subtree is held by its top's inode id: a rename of
				// the directory keeps the key's subtree.
				p, err := namespace.Clean(path)
				if err != nil || p == "/" {
					return usageErr("--path", fmt.Errorf("%q: want an absolute path below /", path))
				}
				conn, err := dialFS(cmd, g, addr)
				if err != nil {
					return fmt.Errorf("key new --path: %w", err)
				}
				ino, err := resolveDir(cmd.Context(), conn.FS, "--path", p)
				conn.Close()
				if err != nil {
					return fmt.Errorf("key new: %w", err)
				}
				sc.Root, sc.Path = ino, p
			}
			k, err := ck.DeriveScoped(name, c, sc)
			if err != nil {
				return err
			}
			if newOut == "" {
				_, err := cmd.OutOrStdout().Write(k.Marshal())
				return err
			}
			if err := auth.Save(newOut, k); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %q (%s%s) written to %s (mode 0600)\n", k.Name, k.Caps, scopeNote(k.Scope), newOut)
			return nil
		},
	}
	newCmd.Flags().StringVar(&name, "name", "", "the key's name (letters, digits, . _ -), shown in servers' logs")
	newCmd.Flags().StringVar(&caps, "caps", "user", "capabilities: read, write, admin, or user (read,write), comma-separated")
	newCmd.Flags().StringVar(&newOut, "out", "", "file to write (default: print the key line)")
	newCmd.Flags().StringVar(&uids, "uids", "", "user ids the key may act as, comma-separated (default: any, as a mount host's key; root only if listed, else squashed to nobody)")
	newCmd.Flags().StringVar(&protocols, "protocols", "", "the gateways the key may serve, comma-separated: mount, nfs, smb (default: any; atoll's commands refuse to serve another with it)")
	newCmd.Flags().StringVar(&gids, "gids", "", "group ids the key may act as, comma-separated (default: any)")
	newCmd.Flags().StringVar(&path, "path", "", "confine the key to the subtree of this directory (asked of --cluster): it reaches nothing else, and its mounts, gateways and file commands take the directory as their /")
	newCmd.Flags().BoolVar(&readOnly, "read-only", false, "capability read only (same as --caps read)")
	newCmd.Flags().StringVar(&addr, "cluster", "", "manager address(es), asked for the name's next generation after a revocation (default $ATOLL_CLUSTER; none: generation 0)")
	newCmd.Flags().Int64Var(&gen, "gen", -1, "the key's generation (default: the name's next one, from the cluster)")
	var revokeAddr string
	revokeCmd := &cobra.Command{
		Use:   "revoke NAME [--cluster ADDR]",
		Short: "Refuse every key made so far under NAME (admin); its connections are closed within a heartbeat",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mc, _, err := managerClient(g, revokeAddr)
			if err != nil {
				return err
			}
			defer mc.Close()
			epoch, err := mc.Revoke(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("key revoke %s: %w", args[0], err)
			}
			m, err := mc.Map(cmd.Context(), epoch)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "keys named %q below generation %d revoked (map epoch %d); atoll key new --name %s makes generation %d\n",
				args[0], m.Revocations()[args[0]], epoch, args[0], m.Revocations()[args[0]])
			return nil
		},
	}
	revokeCmd.Flags().StringVar(&revokeAddr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	var listAddr string
	listCmd := &cobra.Command{
		Use:   "list [--cluster ADDR]",
		Short: "List what the cluster knows of keys: revoked names and the keys gateways and mounts registered with",
		Long: `Keys are derived from the cluster key and are not stored anywhere, so the
cluster knows a key only by what it did: the names revoked (with the
generation new keys of that name get) and the keys that registered
gateways and mounts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := mapWithin(cmd.Context(), g, listAddr, 10*time.Second)
			if err != nil {
				return err
			}
			users := map[string]int{}
			for _, gw := range m.Gateways {
				if gw.Owner != "" {
					users[gw.Owner]++
				}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "revoked (%d):\n", len(m.Revoked))
			for _, r := range m.Revoked {
				fmt.Fprintf(w, "  %s\tgenerations below %d\n", r.Name, r.Below)
			}
			names := make([]string, 0, len(users))
			for n := range users {
				names = append(names, n)
			}
			sort.Strings(names)
			fmt.Fprintf(w, "registering gateways and mounts (%d):\n", len(names))
			for _, n := range names {
				fmt.Fprintf(w, "  %s\t%d registered\n", n, users[n])
			}
			return nil
		},
	}
	listCmd.Flags().StringVar(&listAddr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	showCmd := &cobra.Command{
		Use:   "show [FILE]",
		Short: "Print a key's name and capabilities (not its secret)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var k *auth.Key
			var err error
			if len(args) == 1 {
				k, err = auth.Load(args[0])
			} else {
				k, err = g.key()
			}
			if err != nil {
				return err
			}
			kind := "derived key"
			if k.IsCluster() {
				kind = "cluster key"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s%s\n", kind, k.Name, k.Caps, scopeNote(k.Scope))
			return nil
		},
	}
	cmd.AddCommand(initCmd, newCmd, showCmd, revokeCmd, listCmd)
	return cmd
}

// mapWithin fetches the cluster map, giving up after d.
func mapWithin(ctx context.Context, g *globalFlags, addr string, d time.Duration) (*cluster.Map, error) {
	mc, _, err := managerClient(g, addr)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return mc.Map(ctx, 0)
}

// scopeNote is "; uids=...;gids=..." for a scoped key, "" otherwise.
func scopeNote(s auth.Scope) string {
	if s.IsZero() {
		return ""
	}
	return "; " + s.String()
}
