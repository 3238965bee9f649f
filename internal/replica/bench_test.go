package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkReplicate measures Replicate on a 3-replica group in one
// process over loopback, with 16 concurrent proposers of 300-byte
// batches (go test -bench Replicate -benchtime 5s).
func BenchmarkReplicate(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("proposers=%d", n), func(b *testing.B) {
			g := newGroup(b, 3, nil)
			l := g.leader()
			val := make([]byte, 300)
			var wg sync.WaitGroup
			start := time.Now()
			per := b.N / n
			for w := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						bt := l.DB().NewBatch()
						_ = bt.Set([]byte(fmt.Sprintf("w%d-%d", w, i)), val, nil)
						if err := l.Replicate(context.Background(), bt.Repr()); err != nil {
							b.Error(err)
							return
						}
						bt.Close()
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*n)/time.Since(start).Seconds(), "entries/s")
		})
	}
}
