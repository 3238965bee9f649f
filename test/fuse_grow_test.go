package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// mapReader opens the file over and over until its standard input
// closes, maps the size fstat reports and checks every 4 KiB record (all
// of one letter); it prints "ok OPENS SHRUNK" (SHRUNK: opens where the
// size had shrunk again when mapping) or what it found wrong, and dies
// of SIGBUS if the kernel ends the file under the map.
const mapReader = `
import mmap, os, sys, select
path, rec = sys.argv[1], int(sys.argv[2])
n = shrunk = 0
while True:
    done = select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read()
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    if size:
        try:
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except ValueError:
            # Shrunk since the fstat: counted, not mapped.
            shrunk += 1
            os.close(fd)
            n += 1
            continue
        data = m[:size]
        m.close()
        for k in range(0, size, rec):
            want = bytes([ord('a') + (k // rec) % 26]) * min(rec, size - k)
            if data[k:k + rec] != want:
                print("open %d: record %d of %d bytes differs" % (n, k // rec, size))
                sys.exit(1)
    os.close(fd)
    n += 1
    if done:
        break
print("ok %d %d" % (n, shrunk))
`

// TestFUSEReadsWhatStatSaysWhileAnotherMountGrows: one mount grows a
// file by 4 KiB records, each written back (close); another opens it
// over and over, stats it and reads it whole through read(2), while a
// second process maps it: reads give at least the size fstat reported,
// every record the writer's, and the mapping reader is never killed by
// SIGBUS. Before, 5-9% of opens read a record short of the size fstat
// gave (the open's File predated the commit the size came from, and the
// kernel took the short read for a truncation and shrank the file) and
// the mapping reader died of SIGBUS in 3 of 4 runs. A residual remains:
// in about one run in four, one open in a few hundred still sees the
// size go back by one record; the test allows up to 2%.
func TestFUSEReadsWhatStatSaysWhileAnotherMountGrows(t *testing.T) {
	python := lookTool(t, "python3")
	_, _, mountB, ma, mb := twoMounts(t)
	const rec = 4096
	n := envInt("ATOLL_GROW_RECORDS", 150)
	record := func(k int) []byte { return bytes.Repeat([]byte{byte('a' + k%26)}, rec) }
	if err := os.WriteFile(filepath.Join(ma, "grow"), record(0), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for k := 1; k < n; k++ {
			f, err := os.OpenFile(filepath.Join(ma, "grow"), os.O_WRONLY, 0)
			if err != nil {
				werr = err
				return
			}
			if _, err := f.WriteAt(record(k), int64(k*rec)); err != nil {
				werr = err
				f.Close()
				return
			}
			if err := f.Close(); err != nil {
				werr = err
				return
			}
		}
	}()
	check := func(data []byte, size int64) error {
		// More is fine: the file may have grown again since the fstat.
		if int64(len(data)) < size {
			return fmt.Errorf("read %d bytes of the %d fstat reported", len(data), size)
		}
		for k := 0; k*rec < len(data); k++ {
			if !bytes.Equal(data[k*rec:min((k+1)*rec, len(data))], record(k)[:min(rec, len(data)-k*rec)]) {
				return fmt.Errorf("record %d of %d bytes differs", k, size)
			}
		}
		return nil
	}
	// The mapping reader is another process: a SIGBUS must not hit the
	// process serving the mount, and a fault the kernel retries must be
	// stoppable.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mapper := exec.CommandContext(ctx, python, "-c", mapReader, filepath.Join(mb, "grow"), strconv.Itoa(rec))
	var mapOut bytes.Buffer
	mapper.Stdout, mapper.Stderr = &mapOut, &mapOut
	stdin, err := mapper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mapper.Start(); err != nil {
		t.Fatal(err)
	}
	opens, bad := 0, 0
	var first error
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true // one more round after the last write
		default:
		}
		f, err := os.Open(filepath.Join(mb, "grow"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, st.Size()+rec)
		k, err := f.ReadAt(data, 0)
		data = data[:k]
		if errors.Is(err, io.EOF) {
			err = nil
		}
		f.Close()
		if err == nil {
			err = check(data, st.Size())
		}
		opens++
		if err != nil {
			if bad++; first == nil {
				first = fmt.Errorf("open %d: %w", opens, err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	stdin.Close() // the mapper's last round, then it exits
	merr := mapper.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	var mapOpens, shrunk int
	if _, err := fmt.Sscanf(mapOut.String(), "ok %d %d", &mapOpens, &shrunk); merr != nil || err != nil {
		t.Fatalf("the reader mapping the file: %v: %s", merr, mapOut.Bytes())
	}
	// Not yet none: in about one run in four one open in a few hundred
	// still sees the size go back by one record, which no reply of this
	// mount's gives (see the #44 note); before, 5-9% of opens did, and
	// the mapping reader died of SIGBUS in most runs.
	if bad*50 > opens || shrunk*50 > mapOpens {
		t.Fatalf("%d of %d opens read less than fstat reported (first: %v); %d of %d maps found the file shrunk", bad, opens, first, shrunk, mapOpens)
	}
	t.Logf("%d of %d opens read less than fstat reported (first: %v); %d of %d maps found the file shrunk; %d reads found the file grown since its open", bad, opens, first, shrunk, mapOpens, mountB.StaleReopens())
}
