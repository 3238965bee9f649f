package main

import (
	"context"
	"strings"

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
