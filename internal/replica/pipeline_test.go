package replica

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stubPipeline is the connection under a mergingPipeline: it records what
// is sent and answers when the test releases an answer.
type stubPipeline struct {
	mu      sync.Mutex
	sent    []*raft.AppendEntriesRequest
	sendErr error
	pending []*stubFuture
	done    chan raft.AppendFuture
	closed  chan struct{}
}

type stubFuture struct {
	args *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
	err  error
}

func (f *stubFuture) Error() error                          { return f.err }
func (f *stubFuture) Start() time.Time                      { return time.Time{} }
func (f *stubFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *stubFuture) Response() *raft.AppendEntriesResponse { return f.resp }

func newStub() *stubPipeline {
	return &stubPipeline{done: make(chan raft.AppendFuture, 16), closed: make(chan struct{})}
}

func (s *stubPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sendErr != nil {
		return nil, s.sendErr
	}
	s.sent = append(s.sent, args)
	f := &stubFuture{args: args, resp: resp}
	s.pending = append(s.pending, f)
	return f, nil
}

func (s *stubPipeline) Consumer() <-chan raft.AppendFuture { return s.done }
func (s *stubPipeline) Close() error                       { close(s.closed); return nil }

// answer answers the oldest request sent: success up to its last entry.
func (s *stubPipeline) answer(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	if len(s.pending) == 0 {
		s.mu.Unlock()
		t.Fatal("nothing sent to answer")
	}
	f := s.pending[0]
	s.pending = s.pending[1:]
	s.mu.Unlock()
	*f.resp = raft.AppendEntriesResponse{Term: f.args.Term, LastLog: lastIndex(f.args), Success: true}
	s.done <- f
}

func (s *stubPipeline) sentCopy() []*raft.AppendEntriesRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// req is a request from raft's pipeline: entries prev+1..prev+n of term.
func req(term, prev uint64, n int, commit uint64) *raft.AppendEntriesRequest {
	a := &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev, PrevLogTerm: term, LeaderCommitIndex: commit}
	for k := 1; k <= n; k++ {
		a.Entries = append(a.Entries, &raft.Log{Index: prev + uint64(k), Term: term, Data: []byte("x")})
	}
	return a
}

func indexes(a *raft.AppendEntriesRequest) []uint64 {
	var out []uint64
	for _, l := range a.Entries {
		out = append(out, l.Index)
	}
	return out
}

// TestPipelineMergesWhileOneIsInFlight: requests raft pipelines while one
// is on the connection go as one (the follower syncs once for them), with
// the first's previous entry, the last's commit index lowered to what the
// leader has synced, and every request answered in order with the merged
// answer; a request of another term or not contiguous goes on its own.
func TestPipelineMergesWhileOneIsInFlight(t *testing.T) {
	stub := newStub()
	synced := uint64(5)
	var syncedMu sync.Mutex
	p := newMergingPipeline(stub, func() uint64 { syncedMu.Lock(); defer syncedMu.Unlock(); return synced })
	defer p.Close()

	reqs := []*raft.AppendEntriesRequest{
		req(2, 0, 2, 0), // 1-2: sent at once
		req(2, 2, 1, 2), // 3
		req(2, 3, 3, 3), // 4-6
		req(2, 6, 0, 6), // commit only
		req(3, 6, 1, 6), // 7, a newer term: not with the others
		req(3, 9, 1, 6), // 10: not contiguous with 7
	}
	var futures []raft.AppendFuture
	for k, a := range reqs {
		f, err := p.AppendEntries(a, new(raft.AppendEntriesResponse))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
		if k == 0 {
			waitFor(t, "the first request sent", func() bool { return len(stub.sentCopy()) == 1 })
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(stub.sentCopy()); n != 1 {
		t.Fatalf("%d requests on the connection while the first is unanswered, want 1", n)
	}
	syncedMu.Lock()
	synced = 4
	syncedMu.Unlock()
	for want := 2; want <= 4; want++ {
		stub.answer(t)
		waitFor(t, "the next request sent", func() bool { return len(stub.sentCopy()) == want })
	}
	stub.answer(t)

	sent := stub.sentCopy()
	if got := indexes(sent[0]); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("first request carries %v, want [1 2]", got)
	}
	m := sent[1]
	if got := indexes(m); !slices.Equal(got, []uint64{3, 4, 5, 6}) {
		t.Errorf("merged request carries %v, want [3 4 5 6]", got)
	}
	if m.PrevLogEntry != 2 || m.Term != 2 {
		t.Errorf("merged request: prev %d term %d, want prev 2 term 2", m.PrevLogEntry, m.Term)
	}
	if m.LeaderCommitIndex != 4 {
		t.Errorf("merged request's commit index %d, want 4 (the leader's synced index, below the last part's 6)", m.LeaderCommitIndex)
	}
	if got := indexes(sent[2]); !slices.Equal(got, []uint64{7}) || sent[2].Term != 3 {
		t.Errorf("third request carries %v of term %d, want [7] of term 3 alone", got, sent[2].Term)
	}
	if got := indexes(sent[3]); !slices.Equal(got, []uint64{10}) {
		t.Errorf("fourth request carries %v, want [10] alone", got)
	}

	// Every request is answered, in order, with its merged request's answer.
	for k, want := range futures {
		select {
		case got := <-p.Consumer():
			if got != want {
				t.Fatalf("answer %d is for another request", k)
			}
			if err := got.Error(); err != nil {
				t.Fatalf("answer %d: %v", k, err)
			}
			if !got.Response().Success || got.Request() != reqs[k] {
				t.Fatalf("answer %d: %+v", k, got.Response())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("answer %d never came", k)
		}
	}
	if r := futures[2].Response(); r.LastLog != 6 {
		t.Errorf("a merged part's answer says last log %d, want the merged request's 6", r.LastLog)
	}
}

// TestPipelineSendFailureAnswersEverything: when the connection refuses a
// request, it and every request after it are answered with the error (raft
// stops the pipeline on it); none is lost silently.
func TestPipelineSendFailureAnswersEverything(t *testing.T) {
	stub := newStub()
	p := newMergingPipeline(stub, func() uint64 { return 100 })
	defer p.Close()
	f1, _ := p.AppendEntries(req(1, 0, 1, 0), new(raft.AppendEntriesResponse))
	waitFor(t, "the first request sent", func() bool { return len(stub.sentCopy()) == 1 })
	f2, _ := p.AppendEntries(req(1, 1, 1, 1), new(raft.AppendEntriesResponse))
	f3, _ := p.AppendEntries(req(2, 1, 1, 1), new(raft.AppendEntriesResponse))
	broken := errors.New("connection reset")
	stub.mu.Lock()
	stub.sendErr = broken
	stub.mu.Unlock()
	stub.answer(t)
	for k, want := range []raft.AppendFuture{f1, f2, f3} {
		select {
		case got := <-p.Consumer():
			if got != want {
				t.Fatalf("answer %d is for another request", k)
			}
			if k > 0 && !errors.Is(got.Error(), broken) {
				t.Fatalf("answer %d: error %v, want %v", k, got.Error(), broken)
			}
			if k > 0 && got.Response().Success {
				t.Fatalf("answer %d: success for a request never sent", k)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("answer %d never came", k)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendEntries(req(2, 2, 1, 1), new(raft.AppendEntriesResponse)); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("append after close: %v, want ErrPipelineShutdown", err)
	}
}
