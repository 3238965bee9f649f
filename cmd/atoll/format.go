package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
)

func newFormatCmd(g *globalFlags) *cobra.Command {
	var addr string
	var islands, storage int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "format --cluster ADDR --islands N [--storage N] [--timeout 2m]",
		Short: "Create the namespace once its islands and storage servers are up (once per cluster)",
		Long: `Create the cluster's namespace: wait until at least --islands metadata
islands have registered with the manager and --storage storage servers are
up, then spread the namespace hash table over every registered island
(not out). An island heartbeats only once it serves, after formatting, so
until then the manager may show it down: registered is what counts.

Run it once, from any machine, after the first start of a new cluster
(atoll dev does it itself). The islands serve only once it has run; the
gateways and mounts wait for it. On a cluster already formatted it says so
and exits 0, so it is safe to run again.

The manager address is --cluster, else $ATOLL_CLUSTER, else ` + defaultCluster + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if islands < 1 {
				return usageErr("--islands", errors.New("must be at least 1 (the number of islands to wait for)"))
			}
			if storage < 1 {
				return usageErr("--storage", errors.New("must be at least 1"))
			}
			if timeout <= 0 {
				return usageErr("--timeout", errors.New("must be positive"))
			}
			addrs := clusterAddrs(addr)
			key, err := g.key()
			if err != nil {
				return err
			}
			mc := cluster.NewClient(addrs, key, log)
			defer mc.Close()
			mc.CallTimeout, mc.LeaderWait = 3*time.Second, 3*time.Second
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return formatWhenUp(ctx, mc, addrs, islands, storage, timeout, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "cluster", "", "manager address(es) (default $ATOLL_CLUSTER, else "+defaultCluster+")")
	f.IntVar(&islands, "islands", 0, "islands that must be up before formatting (required)")
	f.IntVar(&storage, "storage", 1, "storage servers that must be up before formatting")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// formatWhenUp polls the map until enough islands and storage servers are
// up, then formats; a cluster already formatted (before or concurrently)
// is reported and is no error.
func formatWhenUp(ctx context.Context, mc *cluster.Client, addrs []string, islands, storage int, timeout time.Duration, out io.Writer) error {
	var m *cluster.Map
	var lastErr error
	for {
		var err error
		if m, err = mc.Map(ctx, 0); err == nil {
			lastErr = nil
			if m.Formatted {
				return alreadyFormatted(out, m)
			}
			upI, upS := registeredIslands(m), upStorage(m)
			if upI >= islands && upS >= storage {
				break
			}
		} else if ctx.Err() == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil || m == nil {
				return fmt.Errorf("format: %w at %s after %s: %v", errUnreachable, strings.Join(addrs, ","), timeout, rootCause(cmpErr(lastErr, ctx.Err())))
			}
			return fmt.Errorf("format: gave up after %s: %d of %d islands registered, %d of %d storage servers up (%s); start the missing roles, or check they reach the manager at %s",
				timeout, registeredIslands(m), islands, upStorage(m), storage, describeMembers(m), strings.Join(addrs, ","))
		case <-time.After(200 * time.Millisecond):
		}
	}
	f, err := mc.Format(ctx, nil)
	if errors.Is(err, cluster.ErrFormatted) {
		if m, err = mc.Map(ctx, 0); err == nil {
			return alreadyFormatted(out, m)
		}
	}
	if err != nil {
		return fmt.Errorf("format: %w", err)
	}
	fmt.Fprintf(out, "formatted: %d islands, hash table depth %d, %d storage servers, default policy %s (epoch %d)\n",
		len(f.Islands), f.Table.Depth, len(f.Storage), f.DefaultPolicy, f.Epoch)
	return nil
}

func alreadyFormatted(out io.Writer, m *cluster.Map) error {
	fmt.Fprintf(out, "already formatted: %d islands, hash table depth %d (epoch %d); nothing to do\n", len(m.Islands), m.Table.Depth, m.Epoch)
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// registeredIslands counts the islands Format will include. Their state
// says little before formatting: an island registers, then waits for the
// namespace without heartbeats, so the manager marks it down after
// --down-after; it comes up again once it serves.
func registeredIslands(m *cluster.Map) int {
	n := 0
	for _, is := range m.Islands {
		if is.State != cluster.StateOut {
			n++
		}
	}
	return n
}

func upStorage(m *cluster.Map) int {
	n := 0
	for _, s := range m.Storage {
		if s.State == cluster.StateUp {
			n++
		}
	}
	return n
}

// describeMembers lists the registered islands and storage servers with
// their states, e.g. "island 1 up, island 2 down; storage 0 up".
func describeMembers(m *cluster.Map) string {
	var is, ss []string
	for _, i := range m.Islands {
		is = append(is, fmt.Sprintf("island %d registered at %s", i.ID, i.Addr))
	}
	for _, s := range m.Storage {
		ss = append(ss, fmt.Sprintf("storage %d %s at %s", s.Slot, s.State, s.Addr))
	}
	if len(is) == 0 {
		is = []string{"no island registered"}
	}
	if len(ss) == 0 {
		ss = []string{"no storage server registered"}
	}
	return strings.Join(is, ", ") + "; " + strings.Join(ss, ", ")
}
