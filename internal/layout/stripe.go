package layout

// Span is a piece of a byte range that lives in one data fragment.
type Span struct {
	Frag int // data fragment index
	Off  int // offset within the fragment
	Len  int
	Dst  int // offset within the requested range
}

// Spans splits the stripe data range [off, off+n) into per-fragment
// pieces for a stripe of the given shard size. For mirror and none every
// byte is in fragment 0.
func Spans(shard, off, n int) []Span {
	if n <= 0 || shard <= 0 {
		return nil
	}
	var out []Span
	dst := 0
	for n > 0 {
		f, o := off/shard, off%shard
		l := min(shard-o, n)
		out = append(out, Span{Frag: f, Off: o, Len: l, Dst: dst})
		off, n, dst = off+l, n-l, dst+l
	}
	return out
}
