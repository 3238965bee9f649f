package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// TestWaitReadableInline checks that a reader served inline on a
// connection's reader goroutine never waits on a prepared transaction: it
// gets wire.ErrWouldBlock (and is served again on a worker), while the
// same read on a worker waits for the decision.
func TestWaitReadableInline(t *testing.T) {
	lt := newLockTable()
	ino := namespace.Ino(1<<32 | 5)
	tx := metawire.TxID{1}
	if err := lt.acquire(context.Background(), tx, []lockReq{{ino, lockExcl}}, time.Second); err != nil {
		t.Fatal(err)
	}
	lt.setPrepared(tx)
	inline := wire.WithInlineForTest(context.Background())
	if err := lt.waitReadable(inline, ino, time.Minute); !errors.Is(err, wire.ErrWouldBlock) {
		t.Fatalf("inline read of a prepared inode: %v, want ErrWouldBlock", err)
	}
	if err := lt.waitReadable(inline, namespace.Ino(1<<32|6), time.Minute); err != nil {
		t.Fatalf("inline read of a free inode: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- lt.waitReadable(context.Background(), ino, time.Minute) }()
	select {
	case err := <-done:
		t.Fatalf("a worker's read returned before the decision: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	lt.release(tx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
