package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
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
	var name, caps, newOut, uids, gids string
	var readOnly bool
	newCmd := &cobra.Command{
		Use:   "new --name NAME [--caps CAPS | --read-only] [--uids 1000,...] [--gids 1000,...] --out FILE",
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
			ck, err := g.key()
			if err != nil {
				return err
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
	newCmd.Flags().StringVar(&gids, "gids", "", "group ids the key may act as, comma-separated (default: any)")
	newCmd.Flags().BoolVar(&readOnly, "read-only", false, "capability read only (same as --caps read)")
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
	cmd.AddCommand(initCmd, newCmd, showCmd)
	return cmd
}

// scopeNote is "; uids=...;gids=..." for a scoped key, "" otherwise.
func scopeNote(s auth.Scope) string {
	if s.IsZero() {
		return ""
	}
	return "; " + s.String()
}
