package namespace

import (
	"fmt"
	"strconv"
)

// Ino is a 64-bit inode id: the high 32 bits are the bucket, the low 32
// bits a sequence number allocated by the island that owns the bucket. A
// directory's bucket is Bucket of its pathname at creation; a file (or any
// non-directory) takes its parent directory's bucket. The id never changes,
// so rename keeps an inode in its bucket and on its island.
type Ino uint64

const (
	// RootSeq is the sequence of the root directory in RootBucket.
	RootSeq uint32 = 1
	// FirstSeq is the first sequence an island allocates in any bucket.
	// Sequence 0 is never valid and 1 is reserved (the root in RootBucket,
	// unused elsewhere), so every bucket follows one rule.
	FirstSeq uint32 = 2
)

var (
	// RootBucket is the bucket of "/".
	RootBucket = Bucket("/")
	// RootIno is the inode id of the root directory: (RootBucket, RootSeq).
	RootIno = MakeIno(RootBucket, RootSeq)
)

// MakeIno returns the inode id of sequence seq in bucket.
func MakeIno(bucket, seq uint32) Ino { return Ino(uint64(bucket)<<32 | uint64(seq)) }

// Bucket returns the bucket the inode lives in.
func (i Ino) Bucket() uint32 { return uint32(i >> 32) }

// Seq returns the inode's sequence number within its bucket.
func (i Ino) Seq() uint32 { return uint32(i) }

// Valid reports whether the id can name an inode (its sequence is not 0).
func (i Ino) Valid() bool { return i.Seq() != 0 }

// String returns "bucket:seq", each as 8 lower-case hex digits, e.g.
// "5c0e8e38:00000001".
func (i Ino) String() string {
	const hex = "0123456789abcdef"
	var b [17]byte
	v := uint64(i)
	for k := 16; k >= 0; k-- {
		if k == 8 {
			b[k] = ':'
			continue
		}
		b[k] = hex[v&15]
		v >>= 4
	}
	return string(b[:])
}

// ParseIno parses the String form of an inode id or, as printed by ls -i
// and used as NFS fileid, its decimal value. The id must be Valid.
func ParseIno(s string) (Ino, error) {
	var i Ino
	if len(s) == 17 && s[8] == ':' {
		b, err1 := strconv.ParseUint(s[:8], 16, 32)
		q, err2 := strconv.ParseUint(s[9:], 16, 32)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%w: %q", ErrBadIno, s)
		}
		i = MakeIno(uint32(b), uint32(q))
	} else {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %.40q", ErrBadIno, s)
		}
		i = Ino(v)
	}
	if !i.Valid() {
		return 0, fmt.Errorf("%w: %q has sequence 0", ErrBadIno, s)
	}
	return i, nil
}
