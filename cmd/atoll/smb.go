package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/smb"
)

func newSMBCmd(g *globalFlags) *cobra.Command {
	var cfg smb.Config
	var addr, mountArgs string
	cmd := &cobra.Command{
		Use:   "smb --dir DIR [--cluster ADDR] [--listen ADDR] [--share NAME] [--path DIR]",
		Short: "Serve the cluster over SMB2/SMB3 through Samba (Windows and macOS clients)",
		Long: `Run an SMB gateway: an atoll mount of the cluster on DIR/mnt and Samba's
smbd over it, serving the namespace's --path as share --share on --listen.
Users are the cluster's (atoll smb user add); every gateway reads them from
the cluster, so any number of gateways serve the same users and files.
Byte-range locks are the cluster's locks (they conflict with other gateways,
FUSE mounts and NFS clients); oplocks and leases are off (see internal/smb).
Needs root (smbd switches to each user's uid), Samba (Debian: samba) and
nss_wrapper (Debian: libnss-wrapper). The manager address is --cluster,
else $ATOLL_CLUSTER, else ` + defaultCluster + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if cfg.Key, err = g.key(); err != nil {
				return err
			}
			if err := cfg.Key.Scope.ServesErr(cfg.Key.Name, auth.ProtoSMB); err != nil {
				return fmt.Errorf("atoll smb: %w", err)
			}
			cfg.Managers, cfg.Logger = clusterAddrs(addr), log
			cfg.MountArgs = strings.Fields(mountArgs)
			gw, err := smb.New(cfg)
			if err != nil {
				return err
			}
			return gw.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:4450", "address smbd serves on (445 is SMB's port; clients other than smbclient may need it)")
	f.StringVar(&cfg.Dir, "dir", "", "state directory: the gateway's mount, smb.conf, Samba's databases (created)")
	f.StringVar(&cfg.Share, "share", "atoll", "share name")
	f.StringVar(&cfg.Path, "path", "/", "directory of the namespace the share serves")
	f.StringVar(&mountArgs, "mount-args", "", "extra flags for the gateway's atoll mount, space-separated")
	f.StringVar(&cfg.AddrFile, "addr-file", "", "write the listening address to this file once serving")
	f.BoolVar(&cfg.CaseSensitive, "case-sensitive", false, "names are case-sensitive, as on Linux (faster creates in large directories; Windows and macOS clients expect case-blind names)")
	cmd.AddCommand(newSMBUserCmd(g))
	return cmd
}

func newSMBUserCmd(g *globalFlags) *cobra.Command {
	var addr string
	// withUsers connects, reads the cluster's SMB users and hands them
	// to fn with the client to save them through.
	withUsers := func(ctx context.Context, fn func(fs *client.FS, us []smb.User) error) error {
		key, err := g.key()
		if err != nil {
			return err
		}
		log, err := g.logger()
		if err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c, err := connect.Dial(dctx, clusterAddrs(addr), key, log)
		cancel()
		if err != nil {
			return err
		}
		defer c.Close()
		us, err := smb.LoadUsers(ctx, c.FS)
		if err != nil {
			return err
		}
		return fn(c.FS, us)
	}
	user := &cobra.Command{Use: "user", Short: "The cluster's SMB users (kept in the cluster, read by every gateway)"}
	user.PersistentFlags().StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	var uid, gid uint32
	var password string
	add := &cobra.Command{
		Use:   "add NAME --uid UID --gid GID [--password PW]",
		Short: "Add a user, or set its identity and password (the password from standard input unless --password)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("password") {
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("atoll smb user add: reading the password from standard input: %w", err)
				}
				password = strings.TrimRight(line, "\r\n")
			}
			if password == "" {
				return errors.New("atoll smb user add: empty password")
			}
			u := smb.User{Name: args[0], UID: uid, GID: gid, NTHash: smb.NTHash(password)}
			if err := u.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := withUsers(ctx, func(fs *client.FS, us []smb.User) error {
				return smb.SaveUsers(ctx, fs, smb.SetUser(us, u))
			}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "smb user %s: uid %d, gid %d (gateways load it within seconds)\n", u.Name, u.UID, u.GID)
			return nil
		},
	}
	add.Flags().Uint32Var(&uid, "uid", 0, "Atoll uid the user's files are created and checked as (not 0)")
	add.Flags().Uint32Var(&gid, "gid", 0, "Atoll gid (not 0)")
	add.Flags().StringVar(&password, "password", "", "the password (visible to other local users in the process list: prefer standard input)")
	_ = add.MarkFlagRequired("uid")
	_ = add.MarkFlagRequired("gid")
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a user",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withUsers(ctx, func(fs *client.FS, us []smb.User) error {
				us, ok := smb.RemoveUser(us, args[0])
				if !ok {
					return fmt.Errorf("atoll smb user remove: no user %q", args[0])
				}
				return smb.SaveUsers(ctx, fs, us)
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the users (name, uid, gid)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withUsers(cmd.Context(), func(_ *client.FS, us []smb.User) error {
				for _, u := range us {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d\t%d\n", u.Name, u.UID, u.GID)
				}
				return nil
			})
		},
	}
	user.AddCommand(add, remove, list)
	return user
}
