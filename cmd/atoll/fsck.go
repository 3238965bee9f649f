package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/fsck"
)

func newFsckCmd(g *globalFlags) *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fsck [--cluster ADDR] [--json]",
		Short: "Check the whole namespace across islands and the stripes it references; exit 1 on problems",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			addrs := clusterAddrs(addr)
			key, err := g.key()
			if err != nil {
				return err
			}
			mc := cluster.NewClient(addrs, key, log)
			defer mc.Close()
			m, err := mc.Map(cmd.Context(), 0)
			if err != nil {
				return unreachable(addrs, err)
			}
			refresh := func(ctx context.Context) (*cluster.Map, error) { return mc.Map(ctx, 0) }
			rep, err := fsck.Checker{Key: key, Refresh: refresh}.Run(cmd.Context(), m)
			if err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(map[string]any{
					"clean": rep.Clean(), "islands": rep.Namespace.Islands, "inodes": rep.Namespace.Inodes,
					"dirents": rep.Namespace.Dirents, "blocks": rep.Namespace.Blocks, "stripes": rep.StripesChecked,
					"stripes_gone_during_check": rep.GoneDuringCheck, "problems": rep.Problems(),
				})
				fmt.Println(string(b))
			} else {
				fmt.Printf("checked %d islands: %d inodes, %d entries, %d block pointers, %d stripes\n",
					len(rep.Namespace.Islands), rep.Namespace.Inodes, rep.Namespace.Dirents, rep.Namespace.Blocks, rep.StripesChecked)
				if rep.GoneDuringCheck > 0 {
					fmt.Printf("%d referenced stripes were deleted during the check and are no longer referenced (the cleaner moved their blocks)\n", rep.GoneDuringCheck)
				}
				for _, p := range rep.Problems() {
					fmt.Println("  PROBLEM:", p)
				}
				if rep.Clean() {
					fmt.Println("clean")
				}
			}
			if !rep.Clean() {
				cmd.SilenceErrors = true
				os.Exit(1)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "cluster", "", "manager address (default $ATOLL_CLUSTER or 127.0.0.1:7300)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

var errUnreachable = errors.New("cannot reach the manager")

func unreachable(addrs []string, err error) error {
	return fmt.Errorf("%w at %v: %v (is `atoll dev` running? set ATOLL_CLUSTER)", errUnreachable, addrs, err)
}
