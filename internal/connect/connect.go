// Package connect builds a client (data path + naming layer) from a
// running cluster's manager: it fetches the cluster map, points the data
// client at the storage slots, keeps both following map changes, and
// closes everything together. The CLI, the FUSE mount and the NFS gateway
// all start from here.
package connect

import (
	"context"
	"errors"
	"fmt"
	"github.com/atoll-fs/atoll/internal/auth"
	"log/slog"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/cluster"
)

// ErrNotFormatted is returned when the cluster has no namespace yet.
var ErrNotFormatted = errors.New("connect: the cluster's namespace is not formatted yet (run `atoll format`; atoll dev does it itself)")

// Conn is a connected client.
type Conn struct {
	Managers []string
	Cluster  *cluster.Client
	View     *cluster.View
	Data     *client.Client
	FS       *client.FS
}

// Dial connects to the managers at addrs, authenticating every connection
// with key (nil only for a cluster started in-process without keys); it fails with ErrNotFormatted
// when the cluster has no namespace yet.
func Dial(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger) (*Conn, error) {
	return dial(ctx, addrs, key, log, false, Tune{})
}

// DialTuned is Dial with tune applied to the FS configuration (e.g. a
// checker that must not cache names: AttrTTL of a nanosecond).
func DialTuned(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger, tune func(*client.FSConfig)) (*Conn, error) {
	return dial(ctx, addrs, key, log, false, Tune{FS: tune})
}

// Tune changes the configurations Dial builds; nil fields change nothing.
type Tune struct {
	Data func(*client.Config)   // the data client's (e.g. stripes in flight)
	FS   func(*client.FSConfig) // the naming layer's
}

// DialWith is Dial with both configurations tuned (benchmarks).
func DialWith(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger, tune Tune) (*Conn, error) {
	return dial(ctx, addrs, key, log, false, tune)
}

// DialWhenFormatted is Dial for long-running roles (gateways, the
// manager's cleaner): it waits for a manager to answer and for the
// namespace to be formatted instead of failing.
func DialWhenFormatted(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger) (*Conn, error) {
	return dial(ctx, addrs, key, log, true, Tune{})
}

func dial(ctx context.Context, addrs []string, key *auth.Key, log *slog.Logger, wait bool, tune Tune) (*Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	mc := cluster.NewClient(addrs, key, log)
	var view *cluster.View
	var err error
	if wait {
		view, err = cluster.WaitView(ctx, mc, log, "client")
	} else {
		view, err = cluster.NewView(ctx, mc)
	}
	if err != nil {
		mc.Close()
		return nil, fmt.Errorf("cannot reach the manager at %v: %w (is `atoll dev` running? set ATOLL_CLUSTER)", addrs, err)
	}
	if wait {
		if err := view.WaitFormatted(ctx, log, "client"); err != nil {
			mc.Close()
			return nil, err
		}
	} else if !view.Map().Formatted {
		mc.Close()
		return nil, ErrNotFormatted
	}
	slots, down := slotsOf(view)
	if len(slots) == 0 {
		mc.Close()
		return nil, errors.New("connect: the cluster has no storage servers")
	}
	dcfg := client.Config{Slots: slots, Logger: log, Key: key}
	if tune.Data != nil {
		tune.Data(&dcfg)
	}
	data, err := client.New(dcfg)
	if err != nil {
		mc.Close()
		return nil, err
	}
	_ = data.SetSlots(slots, down)
	view.OnChange(func(*cluster.Map) {
		if s, d := slotsOf(view); len(s) > 0 {
			if err := data.SetSlots(s, d); err != nil {
				log.Warn("client: new storage slots", "err", err)
			}
		}
	})
	fcfg := client.FSConfig{Data: data, Map: view, Logger: log}
	if tune.FS != nil {
		tune.FS(&fcfg)
	}
	fs, err := client.NewFS(fcfg)
	if err != nil {
		data.Close()
		mc.Close()
		return nil, err
	}
	return &Conn{Managers: addrs, Cluster: mc, View: view, Data: data, FS: fs}, nil
}

func slotsOf(v *cluster.View) ([]client.SlotAddr, []uint16) {
	infos, down := v.StorageSlots()
	out := make([]client.SlotAddr, 0, len(infos))
	for _, s := range infos {
		out = append(out, client.SlotAddr{ID: s.Slot, Addr: s.Addr})
	}
	return out, down
}

// Close closes the naming layer, the data client and the manager client.
func (c *Conn) Close() error {
	c.FS.Close()
	c.Data.Close()
	c.Cluster.Close()
	return nil
}

// Watch refreshes the map every interval until ctx is done, so a
// long-lived client notices members going down or coming back even when
// its requests succeed. The caller owns the goroutine running it.
func (c *Conn) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.View.Refresh(ctx)
		}
	}
}
