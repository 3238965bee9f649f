package cleaner

import (
	"errors"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/client"
)

// A grace inside the clients' commit window deletes stripes whose commits
// are still coming: Validate refuses it unless the caller says no client
// is writing.
func TestGraceBelowCommitWindowRefused(t *testing.T) {
	if MinGrace <= client.MaxCommitDelay {
		t.Fatalf("MinGrace %v leaves no margin over MaxCommitDelay %v", MinGrace, client.MaxCommitDelay)
	}
	fs := &client.FS{}
	for _, tc := range []struct {
		grace  time.Duration
		unsafe bool
		ok     bool
	}{
		{0, false, true}, // the default
		{MinGrace, false, true},
		{client.MaxCommitDelay, false, false},
		{time.Second, false, false},
		{time.Second, true, true},
	} {
		c := Config{Data: &client.Client{}, FS: fs, Grace: tc.grace, UnsafeGrace: tc.unsafe}
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadConfig)) {
			t.Errorf("grace %v unsafe %v: Validate = %v, want ok %v", tc.grace, tc.unsafe, err, tc.ok)
		}
	}
}
