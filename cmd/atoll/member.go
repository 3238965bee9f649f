package main

import (
	"context"
	"fmt"
	"net"
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
