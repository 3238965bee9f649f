package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/atoll-fs/atoll/internal/fragment"
	"github.com/atoll-fs/atoll/internal/layout"
	"github.com/atoll-fs/atoll/internal/wire"
)

// The physical layer: one function per storage RPC. Each maps remote error
// statuses to fragment sentinels and marks a slot failed on transport
// errors so that new stripes avoid it.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkSize is the CRC chunk the client sends with puts; it matches the
// storage server's default so the server can store the CRCs as sent.
const chunkSize = 64 << 10

func chunkCRCs(b []byte) []uint32 {
	out := make([]uint32, 0, (len(b)+chunkSize-1)/chunkSize)
	for off := 0; off < len(b); off += chunkSize {
		out = append(out, crc32.Checksum(b[off:min(off+chunkSize, len(b))], castagnoli))
	}
	return out
}

func (c *Client) call(ctx context.Context, slot uint16, op uint16, msg fragment.Message, payload, dst []byte) (wire.Reply, error) {
	addr, ok := c.slots.Load().addr[slot]
	if !ok {
		return wire.Reply{}, fmt.Errorf("%w: %d", ErrUnknownSlot, slot)
	}
	var m []byte
	if msg != nil {
		m = fragment.Marshal(msg)
	}
	rep, err := c.pool.Call(ctx, addr, op, 0, m, payload, dst)
	if err != nil {
		var re *wire.RemoteError
		if !errors.As(err, &re) {
			// Transport trouble: the server is down, slow or unreachable.
			c.markFailed(slot)
			return rep, fmt.Errorf("slot %d (%s): %w: %v", slot, addr, fragment.ErrUnavailable, err)
		}
		return rep, fmt.Errorf("slot %d (%s): %w", slot, addr, fragment.RemoteErr(err))
	}
	return rep, nil
}

// putFragment stores data (content plus trailer) as fragment id on slot.
// A put that finds the fragment already there (a retry after a lost
// reply) succeeds if the stored checksums equal ours.
func (c *Client) putFragment(ctx context.Context, slot uint16, id fragment.ID, data []byte, repair bool) error {
	if err := c.cfg.Faults.Hit("client.put.before"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	crcs := chunkCRCs(data)
	req := &fragment.PutReq{ID: id, Repair: repair, ChunkSize: chunkSize, CRCs: crcs}
	_, err := c.call(ctx, slot, fragment.OpPut, req, data, nil)
	if errors.Is(err, fragment.ErrExists) && !repair {
		info, ierr := c.infoFragment(ctx, slot, id)
		if ierr == nil && int(info.Length) == len(data) && equalCRCs(info, crcs) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", id, err)
	}
	return nil
}

func equalCRCs(info fragment.Info, crcs []uint32) bool {
	if info.ChunkSize != chunkSize || len(info.CRCs) != len(crcs) {
		return false
	}
	for i := range crcs {
		if info.CRCs[i] != crcs[i] {
			return false
		}
	}
	return true
}

// readFragment reads len(dst) bytes at off, with the read token of block
// p if the island gave one (a tenant's key; p may be nil). It returns the number of bytes
// read and the fragment's stored length (content plus trailer).
func (c *Client) readFragment(ctx context.Context, slot uint16, id fragment.ID, off int64, dst []byte, p *layout.Pointer) (int, int64, error) {
	req := &fragment.ReadReq{ID: id, Off: uint64(off), Len: uint32(len(dst))}
	if p != nil && len(p.Token) > 0 {
		req.Token, req.Grant = p.Token, p.Grant()
	}
	rep, err := c.call(ctx, slot, fragment.OpRead, req, nil, dst)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", id, err)
	}
	var rr fragment.ReadResp
	if err := fragment.Unmarshal(rep.Msg, &rr); err != nil {
		return 0, 0, fmt.Errorf("read %s: reply: %w", id, err)
	}
	n := copy(dst, rep.Payload) // no-op copy when the payload landed in dst
	return n, int64(rr.Length), nil
}

func (c *Client) infoFragment(ctx context.Context, slot uint16, id fragment.ID) (fragment.Info, error) {
	var info fragment.Info
	rep, err := c.call(ctx, slot, fragment.OpInfo, &fragment.IDReq{ID: id}, nil, nil)
	if err != nil {
		return info, fmt.Errorf("info %s: %w", id, err)
	}
	if err := fragment.Unmarshal(rep.Msg, &info); err != nil {
		return info, fmt.Errorf("info %s: reply: %w", id, err)
	}
	return info, nil
}

// DeleteFragment removes one fragment (used by tests and, later, the cleaner).
func (c *Client) DeleteFragment(ctx context.Context, slot uint16, id fragment.ID) error {
	if _, err := c.call(ctx, slot, fragment.OpDelete, &fragment.IDReq{ID: id}, nil, nil); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return nil
}

// VerifyFragment asks a storage server to verify one fragment against its
// chunk checksums now (what its scrubber does in the background); sick
// ranges are reported, and the server lists the fragment as suspect for
// the cleaner to repair.
func (c *Client) VerifyFragment(ctx context.Context, slot uint16, id fragment.ID) ([]fragment.Range, error) {
	rep, err := c.call(ctx, slot, fragment.OpVerify, &fragment.IDReq{ID: id}, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", id, err)
	}
	var v fragment.VerifyResp
	if err := fragment.Unmarshal(rep.Msg, &v); err != nil {
		return nil, fmt.Errorf("verify %s: reply: %w", id, err)
	}
	return v.Sick, nil
}

// ServerStats asks one storage server for its state.
func (c *Client) ServerStats(ctx context.Context, slot uint16) (fragment.Stats, error) {
	var st fragment.Stats
	rep, err := c.call(ctx, slot, fragment.OpStat, nil, nil, nil)
	if err != nil {
		return st, fmt.Errorf("stat slot %d: %w", slot, err)
	}
	if err := fragment.Unmarshal(rep.Msg, &st); err != nil {
		return st, fmt.Errorf("stat slot %d: reply: %w", slot, err)
	}
	return st, nil
}

// newestSeq asks one server for the newest stripe of a log.
func (c *Client) newestSeq(ctx context.Context, slot uint16, log uint64) (uint64, bool, error) {
	rep, err := c.call(ctx, slot, fragment.OpNewest, &fragment.LogReq{Log: log}, nil, nil)
	if err != nil {
		return 0, false, err
	}
	var nr fragment.NewestResp
	if err := fragment.Unmarshal(rep.Msg, &nr); err != nil {
		return 0, false, err
	}
	return nr.Seq, nr.Found, nil
}

// ScanSlot lists one page of every fragment a storage server holds, after
// *after (nil: from the first), for the cleaner and repair.
func (c *Client) ScanSlot(ctx context.Context, slot uint16, after *fragment.ID, limit int) (fragment.ScanResp, error) {
	req := fragment.ScanReq{First: after == nil, Limit: uint32(limit)}
	if after != nil {
		req.After = *after
	}
	var r fragment.ScanResp
	rep, err := c.call(ctx, slot, fragment.OpScan, &req, nil, nil)
	if err != nil {
		return r, fmt.Errorf("scan slot %d: %w", slot, err)
	}
	if err := fragment.Unmarshal(rep.Msg, &r); err != nil {
		return r, fmt.Errorf("scan slot %d: reply: %w", slot, err)
	}
	return r, nil
}

// ScanAllSlot lists every fragment a storage server holds, following the
// pages of ScanSlot, and the fragments it found corrupt.
func (c *Client) ScanAllSlot(ctx context.Context, slot uint16) (fragment.ScanResp, error) {
	var all fragment.ScanResp
	var after *fragment.ID
	for {
		page, err := c.ScanSlot(ctx, slot, after, 5000)
		if err != nil {
			return all, err
		}
		all.Entries = append(all.Entries, page.Entries...)
		all.Suspect = append(all.Suspect, page.Suspect...)
		if !page.More || len(page.Entries) == 0 {
			return all, nil
		}
		last := page.Entries[len(page.Entries)-1].ID
		after = &last
	}
}
