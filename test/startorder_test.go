package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/devcluster"
)

// An island and an NFS gateway started before any manager answers wait
// for one (machines come up in any order; the fault engine restarted
// roles while the manager was down, and they exited for good): both are
// still running seconds later, and register once the manager starts.
func TestRolesWaitForTheManager(t *testing.T) {
	exe := atoll(t)
	dir := t.TempDir()
	base := freeBase(t, 4)
	mgr := fmt.Sprintf("127.0.0.1:%d", base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(name string, noWait bool, args ...string) *devcluster.Child {
		t.Helper()
		c, err := devcluster.Start(ctx, devcluster.ChildSpec{Name: name, Exe: exe, Args: append(args, "--log-level", "warn"),
			AddrFile: filepath.Join(dir, name+".addr"), Output: os.Stderr, NoWait: noWait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(10 * time.Second) })
		return c
	}
	island := start("island1", true, "meta", "--dir", filepath.Join(dir, "island1"), "--id", "1",
		"--listen", fmt.Sprintf("127.0.0.1:%d", base+2), "--manager", mgr)
	gw := start("nfs", true, "nfs", "--cluster", mgr, "--listen", fmt.Sprintf("127.0.0.1:%d", base+3))
	time.Sleep(3 * time.Second)
	for _, c := range []*devcluster.Child{island, gw} {
		select {
		case <-c.Done():
			t.Fatalf("%s exited while no manager answered: %v", c.Name, c.ExitErr())
		default:
		}
	}
	start("manager", false, "manager", "--dir", filepath.Join(dir, "manager"), "--listen", mgr, "--raft-listen", fmt.Sprintf("127.0.0.1:%d", base+1))
	mc := cluster.NewClient([]string{mgr}, testKey, quietLogger())
	defer mc.Close()
	for {
		m, err := mc.Map(ctx, 0)
		if err == nil && len(m.Islands) == 1 && m.Islands[0].State == cluster.StateUp {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the island never registered once the manager started: %v %+v", err, m)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
