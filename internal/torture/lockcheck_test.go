package torture

import (
	"strings"
	"testing"
)

// hold is an increment of counter 0 by client, granted at acq, confirmed
// held until held, that read read.
func hold(client int, acq, held int64, read int64, out incOutcome) lockHold {
	return lockHold{Client: client, Owner: "lib", AcqStart: acq - 1, AcqEnd: acq, HeldUntil: held, RelStart: held + 1, RelEnd: held + 2, Read: read, Outcome: out}
}

func TestCheckLocks(t *testing.T) {
	for _, c := range []struct {
		name  string
		holds []lockHold
		final int64
		want  string // a violation containing this; "" none
	}{
		{"clean, one after another", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 40, 1, incAcked),
			hold(0, 50, 60, 2, incAcked),
		}, 3, ""},
		{"a wait, a failed request, a give-up before the write", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			{Client: 1, AcqStart: 5, Read: -1, Outcome: incNoLock},
			hold(1, 25, 30, 1, incNoWrite),
			hold(2, 31, 40, 1, incAcked),
		}, 2, ""},
		{"unknown increments may or may not land", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 0, 1, incUnknown), // its session may have ended: proves nothing
			hold(2, 35, 40, 1, incAcked),  // read before the unknown write landed
			hold(0, 50, 60, 2, incAcked),
		}, 3, ""},
		{"an unknown increment that landed", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 32, 1, incUnknown),
			hold(2, 35, 40, 2, incAcked),
		}, 3, ""},
		{"touching holds are not a double grant", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 20, 30, 1, incAcked),
		}, 2, ""},
		{"double grant", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 15, 25, 1, incNoWrite),
		}, 1, "double grant"},
		{"double grant inside a long hold", []lockHold{
			hold(0, 10, 100, 0, incAcked),
			hold(1, 20, 30, 1, incNoWrite),
			hold(2, 40, 50, 1, incNoWrite),
		}, 1, "double grant"},
		{"an unconfirmed grant inside a hold", []lockHold{
			hold(0, 10, 100, 0, incAcked),
			{Client: 1, Owner: "lib", AcqStart: 40, AcqEnd: 50, Read: 1, Outcome: incUnknown, Lost: true},
		}, 1, "double grant"},
		{"an unconfirmed grant may precede a hold", []lockHold{
			{Client: 1, Owner: "lib", AcqStart: 5, AcqEnd: 15, Read: 0, Outcome: incNoWrite, Lost: true},
			hold(0, 10, 20, 0, incAcked),
		}, 1, ""},
		{"an unconfirmed grant may follow a hold", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			{Client: 1, Owner: "lib", AcqStart: 15, AcqEnd: 25, Read: 1, Outcome: incNoWrite, Lost: true},
		}, 1, ""},
		{"lost update", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 40, 0, incAcked), // read what the first read: its write was not seen
		}, 1, "lost update"},
		{"lost update whose holds do not overlap in order", []lockHold{
			hold(0, 10, 20, 5, incAcked),
			hold(1, 30, 40, 3, incAcked),
		}, 6, "read 3 after an acknowledged increment wrote 6"},
		{"acknowledged increment lost", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 40, 1, incAcked),
		}, 1, "acknowledged increments lost"},
		{"landed twice", []lockHold{
			hold(0, 10, 20, 0, incAcked),
			hold(1, 30, 40, 1, incUnknown),
		}, 3, "landed twice"},
		{"rolled back by an unknown write", []lockHold{
			hold(0, 10, 20, 0, incUnknown),
			hold(1, 30, 40, 7, incAcked),
			hold(1, 50, 60, 8, incAcked),
		}, 2, "rolled back"},
		{"unreadable counter", []lockHold{hold(0, 10, 20, 0, incAcked)}, -1, "unreadable"},
	} {
		got := checkLocks(c.holds, []int64{c.final})
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: violations %q, want none", c.name, got)
		case c.want != "" && !strings.Contains(strings.Join(got, "\n"), c.want):
			t.Errorf("%s: violations %q, want one with %q", c.name, got, c.want)
		}
	}
}

// Each counter file is judged by its own holds only.
func TestCheckLocksPerFile(t *testing.T) {
	a := hold(0, 10, 20, 0, incAcked)
	b := hold(1, 15, 25, 0, incAcked)
	b.File = 1
	if got := checkLocks([]lockHold{a, b}, []int64{1, 1}); len(got) > 0 {
		t.Fatalf("holds of two files: %q", got)
	}
	b.File = 0
	if got := checkLocks([]lockHold{a, b}, []int64{1, 0}); len(got) < 2 {
		t.Fatalf("holds of one file: %q, want the double grant and the lost update", got)
	}
}

func TestCounterValue(t *testing.T) {
	for _, v := range []int64{0, 1, 99999, 1e11} {
		b := counterValue(v)
		if len(b) != counterWidth {
			t.Fatalf("%d: %q is %d bytes", v, b, len(b))
		}
		if got, err := parseCounter(b); err != nil || got != v {
			t.Fatalf("%q: %d, %v", b, got, err)
		}
	}
	for _, b := range []string{"", "12\n", "0000000000x1\n", "0000000000001"} {
		if _, err := parseCounter([]byte(b)); err == nil {
			t.Fatalf("%q parsed", b)
		}
	}
}
