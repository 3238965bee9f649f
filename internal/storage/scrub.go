package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/atoll-fs/atoll/internal/fragment"
)

// scrubPage is how many ids the scrubber lists at a time; it does not keep
// a pebble iterator open across the (slow, throttled) verification.
const scrubPage = 256

// Scrub re-verifies every fragment, pass after pass, at most bytesPerSec
// (0 = unlimited), sleeping pause between passes, until ctx is done; it then
// returns ctx's error. Sick ranges go to OnCorrupt and the stats. The caller
// owns the goroutine.
func (s *Store) Scrub(ctx context.Context, bytesPerSec int64, pause time.Duration) error {
	for {
		if err := s.ScrubOnce(ctx, bytesPerSec); err != nil {
			return err
		}
		if err := sleepCtx(ctx, pause); err != nil {
			return err
		}
	}
}

// ScrubOnce makes one verification pass over all fragments.
func (s *Store) ScrubOnce(ctx context.Context, bytesPerSec int64) error {
	s.mu.Lock()
	s.mu.scrub.PassBytes, s.mu.scrub.PassFragments = 0, 0
	s.mu.Unlock()
	th := throttle{rate: bytesPerSec, start: time.Now()}
	// Pace between fragments, not inside one: sleeping inside verify would
	// hold up Close.
	account := func(n int64) error {
		s.mu.Lock()
		s.mu.scrub.PassBytes += n
		s.mu.scrub.Bytes += n
		s.mu.Unlock()
		th.done += n
		return ctx.Err()
	}
	var after *fragment.ID
	for {
		ids, err := s.scrubPageIDs(ctx, after)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			break
		}
		for _, id := range ids {
			bad, err := s.verify(ctx, id, account)
			if werr := th.wait(ctx); werr != nil {
				return werr
			}
			switch {
			case err == nil:
			case errors.Is(err, ErrNotFound):
				continue // deleted since listed
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, ErrClosed):
				return fmt.Errorf("storage: scrub: %w", ErrClosed)
			default:
				// One unreadable fragment must not stop the scrub.
				s.log.Warn("storage: scrub", "id", id, "err", err)
				continue
			}
			s.mu.Lock()
			s.mu.scrub.PassFragments++
			s.mu.scrub.CorruptFound += int64(len(bad))
			s.mu.Unlock()
		}
		after = &ids[len(ids)-1]
	}
	s.mu.Lock()
	s.mu.scrub.Passes++
	s.mu.scrub.LastPassEnd = time.Now()
	s.mu.Unlock()
	return nil
}

func (s *Store) scrubPageIDs(ctx context.Context, after *fragment.ID) ([]fragment.ID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("storage: scrub: %w", err)
	}
	defer s.exit()
	lower := []byte{keyPrefix}
	if after != nil {
		lower = append(appendKey(nil, *after), 0)
	}
	ids := make([]fragment.ID, 0, scrubPage)
	err := s.scan(lower, []byte{keyPrefix + 1}, func(id fragment.ID, _ []byte) (bool, error) {
		ids = append(ids, id)
		return len(ids) < scrubPage, nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: scrub: %w", err)
	}
	return ids, nil
}

// throttle paces work to rate bytes per second since start (0 = no limit).
type throttle struct {
	rate  int64
	start time.Time
	done  int64
}

// wait sleeps until done bytes are due.
func (t *throttle) wait(ctx context.Context) error {
	if t.rate <= 0 {
		return ctx.Err()
	}
	due := time.Duration(float64(t.done) / float64(t.rate) * float64(time.Second))
	return sleepCtx(ctx, due-time.Since(t.start))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
