package replica

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A follower stores the AppendEntries requests of one connection one at
// a time, each with a synced write. hashicorp/raft's leader pipelines a
// request for every group of entries as they come, so under load a
// follower syncs once per small request, and a request waits behind the
// syncs of those before it. mergingPipeline keeps at most
// pipelineInFlight requests on the connection and merges those that
// arrive meanwhile into one: the follower syncs once for all of them.
// A lone request is sent at once, as before.
//
// Measured with `atoll bench meta --islands 3 --replicas 3` (see doc.go).
const (
	pipelineInFlight = 1
	// A merged request carries at most this many entries or bytes (the
	// rest wait for the next): a follower's sync and the leader's
	// memory stay bounded.
	mergeMaxEntries = 512
	mergeMaxBytes   = 4 << 20
	// pipelineQueue bounds the requests held back: AppendEntries blocks
	// beyond it, as raft's own pipeline does when too many are in flight.
	pipelineQueue = 128
)

// mergingPipeline is a raft.AppendPipeline over another one (see above).
// It also lowers each request's commit index to what the leader has
// synced (syncedTransport), when the request is sent.
type mergingPipeline struct {
	inner    raft.AppendPipeline
	synced   func() uint64
	consumer chan raft.AppendFuture

	mu struct {
		sync.Mutex
		cond     sync.Cond
		queue    []*appendFuture  // accepted, not sent
		inFlight []*mergedRequest // sent, not answered, in order
		sending  bool             // a request is being written (takeLocked)
		sendErr  error            // a send failed: nothing more is sent
		closed   bool
	}
	wg sync.WaitGroup // send and receive loops
	// stop ends the receive loop (the sender stops on mu.closed); failed
	// wakes it when a send failed.
	stop, failed chan struct{}
}

// mergedRequest is one request sent on the inner pipeline for one or
// more accepted ones.
type mergedRequest struct {
	parts []*appendFuture
	err   error // the send failed: no inner answer comes
}

// appendFuture is the future of one request raft handed us.
type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error
	done  chan struct{}
}

func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}
func (f *appendFuture) Start() time.Time                      { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }

func newMergingPipeline(inner raft.AppendPipeline, synced func() uint64) *mergingPipeline {
	p := &mergingPipeline{inner: inner, synced: synced, consumer: make(chan raft.AppendFuture, pipelineQueue),
		stop: make(chan struct{}), failed: make(chan struct{}, 1)}
	p.mu.cond.L = &p.mu
	p.wg.Add(2)
	go p.sendLoop()
	go p.receiveLoop()
	return p
}

// AppendEntries accepts a request; it is sent (perhaps merged with
// others) once fewer than pipelineInFlight are on the connection: at
// once, from the caller, when the connection is idle.
func (p *mergingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	p.mu.Lock()
	for len(p.mu.queue) >= pipelineQueue && !p.mu.closed {
		p.mu.cond.Wait()
	}
	if err := p.mu.sendErr; p.mu.closed || err != nil {
		if p.mu.closed {
			err = raft.ErrPipelineShutdown
		}
		p.mu.Unlock()
		return nil, err
	}
	p.mu.queue = append(p.mu.queue, f)
	m := p.takeLocked()
	if m == nil {
		p.mu.cond.Broadcast() // the send loop's
	}
	p.mu.Unlock()
	if m != nil {
		p.send(m)
	}
	return f, nil
}

func (p *mergingPipeline) Consumer() <-chan raft.AppendFuture { return p.consumer }

func (p *mergingPipeline) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	p.mu.cond.Broadcast()
	p.mu.Unlock()
	close(p.stop)
	err := p.inner.Close()
	p.wg.Wait()
	return err
}

// sendLoop sends what is queued whenever the connection has room.
func (p *mergingPipeline) sendLoop() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var m *mergedRequest
		for !p.mu.closed && p.mu.sendErr == nil {
			if m = p.takeLocked(); m != nil {
				break
			}
			p.mu.cond.Wait()
		}
		p.mu.Unlock()
		if m == nil {
			return
		}
		p.send(m)
	}
}

// takeLocked takes what is queued for one request, if the connection has
// room and nobody else is sending: the caller sends it (send).
func (p *mergingPipeline) takeLocked() *mergedRequest {
	if p.mu.sending || p.mu.closed || p.mu.sendErr != nil || len(p.mu.queue) == 0 || len(p.mu.inFlight) >= pipelineInFlight {
		return nil
	}
	n := mergeable(p.mu.queue)
	m := &mergedRequest{parts: append([]*appendFuture(nil), p.mu.queue[:n]...)}
	p.mu.queue = append(p.mu.queue[:0], p.mu.queue[n:]...)
	p.mu.inFlight = append(p.mu.inFlight, m)
	p.mu.sending = true
	return m
}

// send sends m (taken by takeLocked) on the connection.
func (p *mergingPipeline) send(m *mergedRequest) {
	args := merge(m.parts)
	args.LeaderCommitIndex = min(args.LeaderCommitIndex, p.synced())
	_, err := p.inner.AppendEntries(args, new(raft.AppendEntriesResponse))
	p.mu.Lock()
	p.mu.sending = false
	if err != nil {
		// No inner answer will come for m: the receive loop answers it,
		// and what is queued, with the error once the requests before it
		// are answered; raft then stops this pipeline.
		m.err = err
		p.mu.sendErr = err
		m.parts = append(m.parts, p.mu.queue...)
		p.mu.queue = nil
	}
	p.mu.cond.Broadcast()
	p.mu.Unlock()
	if err != nil {
		select {
		case p.failed <- struct{}{}:
		default:
		}
	}
}

// receiveLoop answers the accepted requests, in order, as the inner
// pipeline's answers come (or a send failed).
func (p *mergingPipeline) receiveLoop() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var failed *mergedRequest
		if len(p.mu.inFlight) > 0 && p.mu.inFlight[0].err != nil {
			failed = p.mu.inFlight[0]
			p.mu.inFlight = p.mu.inFlight[1:]
		}
		p.mu.Unlock()
		if failed != nil {
			if !p.answer(failed.parts, nil, failed.err) {
				return
			}
			continue
		}
		select {
		case <-p.stop:
			return
		case <-p.failed:
		case inner := <-p.inner.Consumer():
			p.mu.Lock()
			if len(p.mu.inFlight) == 0 || p.mu.inFlight[0].err != nil {
				p.mu.Unlock()
				continue // cannot happen: inner answers what it was sent, in order
			}
			m := p.mu.inFlight[0]
			p.mu.inFlight = p.mu.inFlight[1:]
			p.mu.cond.Broadcast()
			p.mu.Unlock()
			// Each part's answer is the merged one's: a follower that took
			// the merged request took every part of it.
			if !p.answer(m.parts, inner.Response(), inner.Error()) {
				return
			}
		}
	}
}

// answer completes parts and hands them to raft in order; false when the
// pipeline closed meanwhile.
func (p *mergingPipeline) answer(parts []*appendFuture, resp *raft.AppendEntriesResponse, err error) bool {
	for _, f := range parts {
		if resp != nil {
			*f.resp = *resp
		}
		f.err = err
		close(f.done)
	}
	for _, f := range parts {
		select {
		case p.consumer <- f:
		case <-p.stop:
			return false
		}
	}
	return true
}

// mergeable is how many of the queued requests, from the first, go in
// one: contiguous entries of one term, within the bounds.
func mergeable(q []*appendFuture) int {
	n, entries, bytes := 1, len(q[0].args.Entries), logBytes(q[0].args.Entries)
	for ; n < len(q); n++ {
		prev, next := q[n-1].args, q[n].args
		if next.Term != prev.Term || next.PrevLogEntry != lastIndex(prev) {
			break
		}
		entries += len(next.Entries)
		bytes += logBytes(next.Entries)
		if entries > mergeMaxEntries || bytes > mergeMaxBytes {
			break
		}
	}
	return n
}

// merge is one request for parts (mergeable): the first's previous
// entry, every part's entries, the last's header and commit index.
func merge(parts []*appendFuture) *raft.AppendEntriesRequest {
	if len(parts) == 1 {
		a := *parts[0].args
		return &a
	}
	a := *parts[len(parts)-1].args
	a.PrevLogEntry, a.PrevLogTerm = parts[0].args.PrevLogEntry, parts[0].args.PrevLogTerm
	a.Entries = nil
	for _, f := range parts {
		a.Entries = append(a.Entries, f.args.Entries...)
	}
	return &a
}

// lastIndex is the index of a request's last entry (its previous entry's
// when it carries none).
func lastIndex(a *raft.AppendEntriesRequest) uint64 {
	if n := len(a.Entries); n > 0 {
		return a.Entries[n-1].Index
	}
	return a.PrevLogEntry
}

func logBytes(ls []*raft.Log) int {
	n := 0
	for _, l := range ls {
		n += len(l.Data) + len(l.Extensions)
	}
	return n
}
