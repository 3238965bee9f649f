package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/atoll-fs/atoll/internal/faults"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/meta"
	"github.com/atoll-fs/atoll/internal/namespace"
)

func newMetaCmd(g *globalFlags) *cobra.Command {
	var cfg meta.Config
	var id uint32
	var mapFile, addrFile, inlineMax string
	cmd := &cobra.Command{
		Use:   "meta --dir DIR --listen ADDR --id N --static-map FILE",
		Short: "Run a metadata island (directories, inodes, block maps, intents)",
		Long: `Run a metadata island.

Until the manager serves the cluster map, the map comes from a JSON file
(--static-map):

  {"epoch": 1, "depth": 2, "entries": [1, 1, 2, 3],
   "islands": {"1": "127.0.0.1:7500", "2": "127.0.0.1:7501", "3": "127.0.0.1:7502"}}

entries has 1<<depth island ids: entry i owns the buckets whose top depth
bits are i. Without --static-map the island is alone: it owns every bucket
at epoch 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger, cfg.ID = log, id
			if id == 0 {
				return usageErr("--id", errors.New("must be a nonzero island id"))
			}
			n, err := layout.ParseSize(inlineMax)
			if err != nil {
				return usageErr("--inline-max", err)
			}
			cfg.InlineMax = n
			if mapFile != "" {
				m, err := meta.LoadMapFile(mapFile)
				if err != nil {
					return usageErr("--static-map", err)
				}
				cfg.Map = m
			} else {
				t, err := namespace.NewTable([]namespace.IslandID{namespace.IslandID(id)}, 0)
				if err != nil {
					return err
				}
				t.Epoch = 1
				cfg.Map = meta.NewStaticMap(t, nil)
			}
			if cfg.Faults, err = faults.FromEnv(); err != nil {
				return err
			}
			isl, err := meta.New(cfg)
			if err != nil {
				return err
			}
			if err := writeAddrFile(addrFile, isl.Addr()); err != nil {
				isl.Close()
				return err
			}
			return isl.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "data directory (created if absent)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7500", "address to serve on")
	f.Uint32Var(&id, "id", 0, "island id in the cluster map")
	f.StringVar(&mapFile, "static-map", "", "JSON cluster map file (see --help)")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	f.StringVar(&inlineMax, "inline-max", "16KiB", "largest file kept inline in its inode")
	return cmd
}
