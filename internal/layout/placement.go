package layout

import (
	"errors"
	"fmt"
	"sort"
)

// Slot is a storage slot as placement sees it.
type Slot struct {
	ID uint16
	Up bool
}

// ErrNoPlacement is returned when too few slots are up to keep a stripe
// readable.
var ErrNoPlacement = errors.New("layout: not enough storage slots up")

// Placement is where the fragments of one stripe go.
type Placement struct {
	Slots []uint16 // Slots[i] holds fragment i
	// Missing lists fragment indexes placed on down slots: they will not be
	// written now, and the stripe must be repaired later.
	Missing []int
}

// Degraded reports whether some fragments could not be placed on up slots.
func (p Placement) Degraded() bool { return len(p.Missing) > 0 }

// Place chooses slots for stripe seq of log (see the package doc). It
// fails when fewer than K slots are up: such a stripe could not be read.
func Place(pol Policy, log, seq uint64, slots []Slot) (Placement, error) {
	w := pol.Width()
	if len(slots) < w {
		return Placement{}, fmt.Errorf("%w: policy %s needs %d slots, cluster has %d", ErrBadPolicy, pol, w, len(slots))
	}
	all := append([]Slot(nil), slots...)
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	var up []Slot
	for _, s := range all {
		if s.Up {
			up = append(up, s)
		}
	}
	cands := all
	if len(up) >= w {
		cands = up
	} else if len(up) < pol.K {
		return Placement{}, fmt.Errorf("%w: %d up, policy %s needs at least %d", ErrNoPlacement, len(up), pol, pol.K)
	}
	n := uint64(len(cands))
	start := (mix(log) + seq*stride(uint64(w), n)) % n
	var pl Placement
	for i := 0; i < w; i++ {
		s := cands[(start+uint64(i))%n]
		pl.Slots = append(pl.Slots, s.ID)
		if !s.Up {
			pl.Missing = append(pl.Missing, i)
		}
	}
	// Keep data fragments on up slots where possible: move missing
	// positions to the parity end, so a degraded stripe still has all its
	// data fragments and reads need no reconstruction.
	if len(pl.Missing) > 0 && pol.Kind == EC {
		var good, bad []uint16
		for _, id := range pl.Slots {
			if slotUp(all, id) {
				good = append(good, id)
			} else {
				bad = append(bad, id)
			}
		}
		pl.Slots = append(good, bad...)
		pl.Missing = pl.Missing[:0]
		for i := len(good); i < w; i++ {
			pl.Missing = append(pl.Missing, i)
		}
	}
	return pl, nil
}

func slotUp(all []Slot, id uint16) bool {
	for _, s := range all {
		if s.ID == id {
			return s.Up
		}
	}
	return false
}

// mix spreads log ids so that different clients start at different slots.
// stride is how far consecutive stripes of a log move along the slots:
// the smallest step of at least the stripe's width that is coprime with n,
// so a log's stripes in flight share few slots (a stripe waits for its
// busiest slot; overlapping windows pile a log's fragments onto the same
// servers while others idle), and every start, hence every slot's turn at
// parity, comes once in n stripes.
func stride(w, n uint64) uint64 {
	s := w
	for gcd(s, n) != 1 {
		s++
	}
	return s
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
