package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/islandload"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// newIslandCmd groups the commands that move namespace table entries
// between islands while the cluster serves.
func newIslandCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "island",
		Short: "Share the namespace among metadata islands while serving: add, remove, rebalance",
		Long: `Move namespace table entries between metadata islands while the cluster
serves. Each move freezes the entry's changes on its island for the time it
takes to copy the entry's records to the other island (reads go on, changes
are retried by the clients), then the manager gives the entry to the other
island. Every step resumes after a crash of either island or the manager.

  atoll island add ID      share the table with island ID (already started and
                           registered, owning nothing yet)
  atoll island remove ID   move every entry of island ID to the others, then
                           mark it out
  atoll island rebalance   even out the entries among the islands that are not
                           out
  atoll island cancel      forget every pending move (entries stay where they are)
  atoll island create      start a new replicated island (a new replica group
                           on the island servers); then add it as above
  atoll island server add|remove|rebalance
                           move island replicas between island servers
  atoll island rebalance --by-load
                           even out the islands' load: measure each entry's
                           operations per second over --window, then move the
                           entries that bring the islands' spread (standard
                           deviation over mean) nearest --tolerance

--dry-run prints the plan and changes nothing.`,
	}
	cmd.AddCommand(newIslandMoveCmd(g, "add"), newIslandMoveCmd(g, "remove"), newIslandMoveCmd(g, "rebalance"), newIslandCancelCmd(g),
		newIslandServerCmd(g), newIslandCreateCmd(g))
	return cmd
}

func newIslandCancelCmd(g *globalFlags) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Cancel every pending entry move (a move already handed over stays)",
		Long: `Forget every pending move of a table entry: each entry stays with (or goes
back to serving on) its source island, which drops whatever the destination
received. A move the manager has already handed to its destination is done
and stays.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, _, err := managerClient(g, addr)
			if err != nil {
				return err
			}
			defer mc.Close()
			m, err := mc.Map(cmd.Context(), 0)
			if err != nil {
				return err
			}
			for _, mv := range m.Moves {
				if _, err := mc.CancelMove(cmd.Context(), mv.ID); err != nil {
					return fmt.Errorf("island cancel: %v: %w", mv, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d pending moves cancelled\n", len(m.Moves))
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	return cmd
}

// managerClient is a client of the managers at addr (default
// $ATOLL_CLUSTER) with the command's key, which it returns too.
func managerClient(g *globalFlags, addr string) (*cluster.Client, *auth.Key, error) {
	log, err := g.logger()
	if err != nil {
		return nil, nil, err
	}
	key, err := g.key()
	if err != nil {
		return nil, nil, err
	}
	return cluster.NewClient(clusterAddrs(addr), key, log), key, nil
}

// islandPlan is what a dry run prints.
type islandPlan struct {
	Depth    uint8               `json:"depth"`
	NewDepth uint8               `json:"new_depth"`
	Moves    []cluster.EntryMove `json:"moves"`
	Entries  map[uint32]int      `json:"entries_after"`
}

func newIslandMoveCmd(g *globalFlags, verb string) *cobra.Command {
	var addr string
	var dryRun, asJSON, byLoad bool
	var timeout, window time.Duration
	var tolerance float64
	use, args := verb+" ID [--dry-run]", cobra.ExactArgs(1)
	if verb == "rebalance" {
		use, args = verb+" [--dry-run]", cobra.NoArgs
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: map[string]string{"add": "Give a new island its share of the namespace", "remove": "Move every entry off an island, then mark it out", "rebalance": "Even out the namespace table among the islands"}[verb],
		Args:  args,
		RunE: func(cmd *cobra.Command, argv []string) error {
			var id uint32
			if len(argv) == 1 {
				var ok bool
				if id, ok = parseID(argv[0]); !ok {
					return usageErr("ID", fmt.Errorf("bad island id %q", argv[0]))
				}
			}
			if timeout <= 0 {
				return usageErr("--timeout", errors.New("must be positive"))
			}
			if byLoad && (window <= 0 || tolerance < 0) {
				return usageErr("--window", errors.New("--window must be positive and --tolerance at least 0"))
			}
			return withManager(cmd, g, addr, timeout, func(ctx context.Context, mc *cluster.Client, key *auth.Key) error {
				if byLoad {
					return islandMovesByLoad(ctx, mc, key, window, tolerance, dryRun, asJSON, cmd.OutOrStdout())
				}
				return islandMoves(ctx, mc, verb, id, dryRun, asJSON, cmd.OutOrStdout())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan, change nothing")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting for the moves after this long (they go on)")
	if verb == "rebalance" {
		f.BoolVar(&byLoad, "by-load", false, "balance the islands' measured load (operations per second per entry) instead of their entry counts")
		f.DurationVar(&window, "window", 10*time.Second, "with --by-load: how long to measure")
		f.Float64Var(&tolerance, "tolerance", 0.1, "with --by-load: the spread of load (standard deviation over mean) to stop at")
	}
	return cmd
}

// islandMovesByLoad measures each entry's load, plans the moves that even
// out the islands' load and unless dryRun carries them out.
func islandMovesByLoad(ctx context.Context, mc *cluster.Client, key *auth.Key, window time.Duration, tolerance float64, dryRun, asJSON bool, out io.Writer) error {
	m, err := mc.Map(ctx, 0)
	if err != nil {
		return err
	}
	if len(m.Moves) > 0 {
		return fmt.Errorf("island rebalance: %d entry moves pending", len(m.Moves))
	}
	load, err := islandload.Sample(ctx, m, key, window)
	if err != nil {
		return fmt.Errorf("island rebalance: %w", err)
	}
	moves, err := islandload.Plan(m, load, tolerance)
	if err != nil {
		return fmt.Errorf("island rebalance: %w", err)
	}
	after := maps.Clone(load.Islands)
	for _, mv := range moves {
		after[namespace.IslandID(mv.From)] -= load.Entries[mv.Entry]
		after[namespace.IslandID(mv.To)] += load.Entries[mv.Entry]
	}
	type planJSON struct {
		WindowSeconds float64                        `json:"window_seconds"`
		Load          map[namespace.IslandID]float64 `json:"ops_per_second"`
		Bytes         map[namespace.IslandID]float64 `json:"bytes_per_second"` // file bytes committed
		Spread        float64                        `json:"spread"`
		SpreadAfter   float64                        `json:"spread_after"`
		Moves         []cluster.EntryMove            `json:"moves"`
	}
	p := planJSON{WindowSeconds: load.Window.Seconds(), Load: load.Islands, Bytes: load.IslandsBytes, Spread: load.Spread(), SpreadAfter: namespace.Spread(after), Moves: moves}
	if asJSON {
		b, _ := json.MarshalIndent(p, "", "  ")
		fmt.Fprintln(out, string(b))
	} else {
		fmt.Fprintf(out, "load over %v (operations/s by island): %v (file bytes/s committed: %v); spread %.3f -> %.3f with %d entry moves\n",
			load.Window.Round(time.Millisecond), roundLoads(load.Islands), roundLoads(load.IslandsBytes), p.Spread, p.SpreadAfter, len(moves))
	}
	if dryRun || len(moves) == 0 {
		return nil
	}
	return cluster.RunIslandMoves(ctx, mc, m.Table, moves, nil)
}

func roundLoads(l map[namespace.IslandID]float64) map[namespace.IslandID]int {
	out := map[namespace.IslandID]int{}
	for id, v := range l {
		out[id] = int(v + 0.5)
	}
	return out
}

// islandMoves plans verb's moves on the current map, and unless dryRun
// carries them out and waits for them.
func islandMoves(ctx context.Context, mc *cluster.Client, verb string, id uint32, dryRun, asJSON bool, out io.Writer) error {
	m, err := mc.Map(ctx, 0)
	if err != nil {
		return err
	}
	var keep []uint32
	for _, is := range m.Islands {
		if is.State != cluster.StateOut && !(verb == "remove" && is.ID == id) || verb == "add" && is.ID == id {
			keep = append(keep, is.ID)
		}
	}
	if id != 0 {
		is, ok := m.Island(id)
		switch {
		case !ok:
			return fmt.Errorf("island %s: no island %d in the cluster map", verb, id)
		case verb == "add" && is.State == cluster.StateDown:
			return fmt.Errorf("island add: island %d is down; start it first", id)
		case verb == "remove" && len(keep) == 0:
			return fmt.Errorf("island remove: island %d is the last one", id)
		}
		if verb == "add" && is.State == cluster.StateOut && !dryRun {
			// An island removed before comes back.
			if _, err := mc.SetState(ctx, cluster.KindIsland, id, cluster.StateUp); err != nil {
				return fmt.Errorf("island add: marking island %d up: %w", id, err)
			}
		}
	}
	split, moves, err := cluster.PlanIslandMoves(m, keep)
	if err != nil {
		return fmt.Errorf("island %s: %w", verb, err)
	}
	plan := islandPlan{Depth: m.Table.Depth, NewDepth: split.Depth, Moves: moves, Entries: map[uint32]int{}}
	after := slices.Clone(split.Entries)
	for _, mv := range moves {
		after[mv.Entry] = mv.To
	}
	for _, owner := range after {
		plan.Entries[owner]++
	}
	if asJSON {
		b, _ := json.MarshalIndent(plan, "", "  ")
		fmt.Fprintln(out, string(b))
	} else {
		fmt.Fprintf(out, "table depth %d -> %d, %d entry moves; entries per island after: %v\n", plan.Depth, plan.NewDepth, len(moves), plan.Entries)
	}
	if dryRun {
		return nil
	}
	last := -1
	err = cluster.RunIslandMoves(ctx, mc, split, moves, func(left int) {
		if left != last && !asJSON {
			fmt.Fprintf(out, "moves left: %d\n", left)
		}
		last = left
	})
	if err != nil {
		return fmt.Errorf("island %s: %w", verb, err)
	}
	if verb == "remove" {
		if _, err := mc.SetState(ctx, cluster.KindIsland, id, cluster.StateOut); err != nil {
			return fmt.Errorf("island remove: marking island %d out: %w", id, err)
		}
		if !asJSON {
			fmt.Fprintf(out, "island %d holds no entry and is marked out\n", id)
		}
	}
	return nil
}
