package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
)

// runWithMember runs a role's server and its cluster membership (register,
// heartbeat) side by side; when either stops, both stop.
func runWithMember(ctx context.Context, run func(context.Context) error, mc cluster.MemberConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	memberDone := make(chan error, 1)
	go func() { memberDone <- cluster.RunMember(ctx, mc) }()
	srvDone := make(chan error, 1)
	go func() { srvDone <- run(ctx) }()
	select {
	case err := <-srvDone:
		cancel()
		<-memberDone
		return err
	case merr := <-memberDone:
		if merr != nil && ctx.Err() == nil {
			cancel() // membership cannot run (bad config): stop serving too
			<-srvDone
			return merr
		}
		return <-srvDone
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkAdvertised refuses, for a role that registers addr with the
// managers, an address the other machines cannot use: an empty or
// wildcard host (":7400", "0.0.0.0:7400", "[::]:7400") would be
// registered as such and every client would dial its own machine. The
// managers refuse one for themselves the same way.
func checkAdvertised(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageErr(flag, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return usageErr(flag, fmt.Errorf("%q: this address is registered with the managers, so it must be one the other machines can reach (e.g. 10.0.0.2%s), not a wildcard", addr, addr[strings.LastIndex(addr, ":"):]))
	}
	return nil
}

// newMemberCmd is `atoll member remove`: forgetting a gateway or mount the
// map still lists (one that is gone; a live one registers again).
func newMemberCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "member", Short: "Manage the cluster map's members"}
	var addr string
	rm := &cobra.Command{
		Use:   "remove gateway/ID [--cluster ADDR]",
		Short: "Forget a gateway or mount (as `atoll status` names it)",
		Long: `Remove a gateway or mount from the cluster map. Gateways and mounts that stop
heartbeating are removed by themselves after 15 minutes; this does it now.
A gateway still running registers again. Storage servers and islands hold
data and leave with ` + "`atoll drain`" + ` and the out state instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseMemberKey(args[0])
			if err != nil {
				return err
			}
			mc, _, err := managerClient(g, addr)
			if err != nil {
				return err
			}
			defer mc.Close()
			epoch, err := mc.Remove(cmd.Context(), k.Kind, k.ID)
			if err != nil {
				return fmt.Errorf("member remove %s: %w", k, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s removed (map epoch %d)\n", k, epoch)
			return nil
		},
	}
	rm.Flags().StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	cmd.AddCommand(rm)
	return cmd
}

// parseMemberKey parses "KIND/ID" (kind as cluster.ParseKind reads it).
func parseMemberKey(s string) (cluster.MemberKey, error) {
	kind, id, ok := strings.Cut(s, "/")
	if !ok {
		return cluster.MemberKey{}, fmt.Errorf("member %q: want KIND/ID, e.g. gateway/123456", s)
	}
	k, err := cluster.ParseKind(kind)
	if err != nil {
		return cluster.MemberKey{}, err
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return cluster.MemberKey{}, fmt.Errorf("member %q: bad id %q", s, id)
	}
	return cluster.MemberKey{Kind: k, ID: uint32(n)}, nil
}
