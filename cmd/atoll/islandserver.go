package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
)

// newIslandServerCmd moves island replicas between island servers.
func newIslandServerCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Move island replicas onto a new island server or off one being removed",
		Long: `Move replicas of replicated islands between island servers while the
cluster serves. The map records where each island's replicas are to be;
each island's leader then adds a new replica as a non-voter, promotes it
once it has caught up, and removes the replica it replaces, one step at a
time, so that the island keeps its quorum throughout.

  atoll island server add ID      give island server ID (started with
                                  ` + "`atoll meta --server-id ID --join`" + `) its share of replicas
  atoll island server remove ID   move every replica off island server ID,
                                  then mark it out (stop it afterwards)
  atoll island server rebalance   even out replicas and preferred leaders

--dry-run prints the new placement and changes nothing.`,
	}
	for _, verb := range []string{"add", "remove", "rebalance"} {
		cmd.AddCommand(newIslandServerMoveCmd(g, verb))
	}
	return cmd
}

func newIslandServerMoveCmd(g *globalFlags, verb string) *cobra.Command {
	var addr string
	var dryRun, asJSON bool
	var wait time.Duration
	use := verb + " ID"
	args := cobra.ExactArgs(1)
	if verb == "rebalance" {
		use, args = verb, cobra.NoArgs
	}
	cmd := &cobra.Command{
		Use:   use + " [--dry-run] [--json]",
		Short: map[string]string{"add": "Move a share of the island replicas onto a new island server", "remove": "Move every island replica off an island server, then mark it out", "rebalance": "Even out island replicas and leaders over the island servers"}[verb],
		Args:  args,
		RunE: func(cmd *cobra.Command, a []string) error {
			var id uint32
			if len(a) == 1 {
				var ok bool
				if id, ok = parseID(a[0]); !ok {
					return usageErr("ID", fmt.Errorf("%q is not an island server id", a[0]))
				}
			}
			return withManager(cmd, g, addr, wait, func(ctx context.Context, mc *cluster.Client, _ *auth.Key) error {
				return moveReplicas(ctx, mc, verb, id, dryRun, asJSON, cmd.OutOrStdout())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.BoolVar(&dryRun, "dry-run", false, "print the new placement and change nothing")
	f.BoolVar(&asJSON, "json", false, "print the placement as JSON")
	f.DurationVar(&wait, "timeout", 0, "give up waiting for the replicas to move after this long (0: wait)")
	return cmd
}

// moveReplicas plans verb's placement, and unless dryRun records it and
// waits until every island's leader reports its group moved.
func moveReplicas(ctx context.Context, mc *cluster.Client, verb string, id uint32, dryRun, asJSON bool, out io.Writer) error {
	m, err := mc.Map(ctx, 0)
	if err != nil {
		return err
	}
	var remove []uint32
	if id != 0 {
		sv, ok := m.IslandServer(id)
		switch {
		case !ok:
			return fmt.Errorf("island server %s: no island server %d in the cluster map (start it with `atoll meta --server-id %d --join` first)", verb, id, id)
		case sv.Out && verb == "add":
			return fmt.Errorf("island server add: island server %d was removed (out); give the new server a new id", id)
		}
		if verb == "remove" {
			remove = []uint32{id}
		}
	}
	sets, err := cluster.PlanReplicas(m, remove)
	if err != nil {
		return fmt.Errorf("island server %s: %w", verb, err)
	}
	if asJSON {
		b, _ := json.MarshalIndent(map[string]any{"changed": sets, "out": remove}, "", "  ")
		fmt.Fprintln(out, string(b))
	} else {
		fmt.Fprintf(out, "%d islands change replicas:\n", len(sets))
		for _, s := range sets {
			old, _ := m.ReplicaSet(s.Island)
			fmt.Fprintf(out, "  island %d: servers %v -> %v\n", s.Island, old, s.Servers)
		}
	}
	if dryRun {
		return nil
	}
	if _, err := mc.SetReplicas(ctx, sets, remove); err != nil {
		return fmt.Errorf("island server %s: %w", verb, err)
	}
	last := -1
	for {
		st, err := mc.Status(ctx)
		if err == nil {
			left := cluster.ReplicasUnsettled(st)
			if len(left) != last && !asJSON {
				fmt.Fprintf(out, "islands still moving replicas: %d %v\n", len(left), left)
			}
			last = len(left)
			if len(left) == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("island server %s: replicas still moving: %w", verb, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	if verb == "remove" && !asJSON {
		fmt.Fprintf(out, "island server %d holds no replica and is marked out; it can be stopped\n", id)
	}
	return nil
}

// newIslandCreateCmd adds a replicated island (a new replica group).
func newIslandCreateCmd(g *globalFlags) *cobra.Command {
	var addr string
	var replicas int
	var dryRun bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "create [--replicas 3] [--dry-run]",
		Short: "Start a new replicated island on the island servers (then `atoll island add ID` gives it entries)",
		Long: `Create a new replicated island: the map places its replicas on the island
servers holding fewest, those servers form the new raft group, and its
leader registers the island. It owns no part of the namespace until
` + "`atoll island add ID`" + ` moves its share of table entries to it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withManager(cmd, g, addr, wait, func(ctx context.Context, mc *cluster.Client, _ *auth.Key) error {
				return createIsland(ctx, mc, replicas, dryRun, cmd.OutOrStdout())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.IntVar(&replicas, "replicas", 3, "replicas of the new island (1, 3 or 5)")
	f.BoolVar(&dryRun, "dry-run", false, "print where the island would be placed and change nothing")
	f.DurationVar(&wait, "timeout", 0, "give up waiting for the island to register after this long (0: wait)")
	return cmd
}

// withManager runs fn with a client of the managers at addr, the
// command's key and its context, bounded by timeout when it is positive.
func withManager(cmd *cobra.Command, g *globalFlags, addr string, timeout time.Duration, fn func(context.Context, *cluster.Client, *auth.Key) error) error {
	mc, key, err := managerClient(g, addr)
	if err != nil {
		return err
	}
	defer mc.Close()
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return fn(ctx, mc, key)
}

// parseID parses a nonzero uint32 id from a command's argument.
func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil && n != 0
}

// createIsland places a new replicated island, records it and waits
// until its leader has registered it.
func createIsland(ctx context.Context, mc *cluster.Client, replicas int, dryRun bool, out io.Writer) error {
	m, err := mc.Map(ctx, 0)
	if err != nil {
		return err
	}
	set, err := cluster.PlanNewIsland(m, replicas)
	if err != nil {
		return fmt.Errorf("island create: %w", err)
	}
	fmt.Fprintf(out, "island %d on island servers %v (preferred leader %d)\n", set.Island, set.Servers, set.Servers[0])
	if dryRun {
		return nil
	}
	if _, err := mc.SetReplicas(ctx, []cluster.ReplicaSet{set}, nil); err != nil {
		return fmt.Errorf("island create: %w", err)
	}
	for {
		if m, err := mc.Map(ctx, 0); err == nil {
			if is, ok := m.Island(set.Island); ok && is.State == cluster.StateUp {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("island create: island %d never registered: %w", set.Island, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "island %d is serving; `atoll island add %d` gives it its share of the namespace\n", set.Island, set.Island)
	return nil
}
