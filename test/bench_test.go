package test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/layout"
)

// BenchmarkWriteEC41 writes 4 MiB stripes through 5 in-process servers; run
// with -cpuprofile to see where the data path spends its time.
func BenchmarkWriteEC41(b *testing.B) {
	servers := startServers(b, 5)
	pipe, _ := strconv.Atoi(os.Getenv("PIPE"))
	c := newClient(b, servers, func(c *client.Config) { c.Pipeline = pipe })
	ps := os.Getenv("POLICY")
	if ps == "" {
		ps = "ec:4+1"
	}
	pol, _ := layout.Parse(ps)
	log, err := c.Log(context.Background(), pol)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := log.Append(context.Background(), buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := log.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
