// Command atoll runs every Atoll role (one subcommand per role) and the CLI.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/atoll-fs/atoll/internal/raftlog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A stop signal is a clean stop: raft's complaints about peers going
	// away with us are not news (raftlog.Stopping).
	context.AfterFunc(ctx, raftlog.Stopping)
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "atoll:", err)
		os.Exit(1)
	}
}
