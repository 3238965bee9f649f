package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	pathpkg "path"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	nfsrpc "github.com/willscott/go-nfs-client/nfs/rpc"
	nfsutil "github.com/willscott/go-nfs-client/nfs/util"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// fsOps is what a workload client does, the same through every access
// path (client library, FUSE mount, NFS). Paths are absolute in the
// Atoll namespace. Errors carry an errno (errnoOf).
type fsOps interface {
	name() string
	// create makes a new file exclusively, writes data and makes it
	// durable (fsync) before returning.
	create(ctx context.Context, path string, data []byte) error
	// createOpen makes a new empty file exclusively and returns how to
	// write its content (write, fsync, close; nil data only closes).
	createOpen(ctx context.Context, path string) (func(ctx context.Context, data []byte) error, error)
	// overwrite writes data at off of an existing file and fsyncs.
	overwrite(ctx context.Context, path string, off int64, data []byte) error
	read(ctx context.Context, path string) ([]byte, error)
	unlink(ctx context.Context, path string) error
	mkdir(ctx context.Context, path string) error
	rmdir(ctx context.Context, path string) error
	rename(ctx context.Context, from, to string) error
	list(ctx context.Context, dir string) ([]string, error)
}

// errnoOf maps an error of any access path to an errno (EIO when it
// carries none).
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	var nerr *nfsc.Error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.As(err, &nerr):
		return syscall.Errno(nerr.ErrorNum)
	}
	return metawire.Errno(metawire.RemoteErr(err))
}

// libOps is the client library, in the engine's process.
type libOps struct {
	fs *client.FS
}

var root = metawire.Root

func (l *libOps) name() string { return "lib" }

func (l *libOps) create(ctx context.Context, path string, data []byte) error {
	fill, err := l.createOpen(ctx, path)
	if err != nil {
		return err
	}
	return fill(ctx, data)
}

func (l *libOps) createOpen(ctx context.Context, path string) (func(context.Context, []byte) error, error) {
	dir, name, err := l.fs.ResolveParent(ctx, root, path)
	if err != nil {
		return nil, err
	}
	r, err := l.fs.Create(ctx, metawire.CreateReq{Cred: root, Dir: dir.Ino, Name: name, Mode: metawire.ModeFile | 0o644, Exclusive: true})
	if err != nil {
		return nil, err
	}
	fh, err := l.fs.OpenWithAttr(ctx, root, r.Attr)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, data []byte) error {
		defer fh.Release()
		if data == nil {
			return nil
		}
		if _, err := fh.WriteAt(ctx, data, 0); err != nil {
			return err
		}
		return fh.Fsync(ctx)
	}, nil
}

func (l *libOps) overwrite(ctx context.Context, path string, off int64, data []byte) error {
	fh, err := l.fs.OpenPath(ctx, root, path)
	if err != nil {
		return err
	}
	defer fh.Release()
	if _, err := fh.WriteAt(ctx, data, off); err != nil {
		return err
	}
	return fh.Fsync(ctx)
}

func (l *libOps) read(ctx context.Context, path string) ([]byte, error) {
	a, err := l.fs.Resolve(ctx, root, path)
	if err != nil {
		return nil, err
	}
	if a.IsDir() {
		return nil, syscall.EISDIR
	}
	fh, err := l.fs.Open(ctx, root, a.Ino)
	if err != nil {
		return nil, err
	}
	defer fh.Release()
	out := make([]byte, fh.Size())
	n, err := fh.ReadAt(ctx, out, 0)
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

func (l *libOps) unlink(ctx context.Context, path string) error {
	dir, name, err := l.fs.ResolveParent(ctx, root, path)
	if err != nil {
		return err
	}
	return l.fs.Unlink(ctx, root, dir.Ino, name)
}

func (l *libOps) mkdir(ctx context.Context, path string) error {
	return l.mkdirMode(ctx, path, 0o755)
}

func (l *libOps) mkdirMode(ctx context.Context, path string, mode uint32) error {
	dir, name, err := l.fs.ResolveParent(ctx, root, path)
	if err != nil {
		return err
	}
	_, err = l.fs.Mkdir(ctx, metawire.CreateReq{Cred: root, Dir: dir.Ino, Name: name, Mode: metawire.ModeDir | mode})
	return err
}

func (l *libOps) rmdir(ctx context.Context, path string) error {
	dir, name, err := l.fs.ResolveParent(ctx, root, path)
	if err != nil {
		return err
	}
	return l.fs.Rmdir(ctx, root, dir.Ino, name)
}

func (l *libOps) rename(ctx context.Context, from, to string) error {
	sd, sn, err := l.fs.ResolveParent(ctx, root, from)
	if err != nil {
		return err
	}
	dd, dn, err := l.fs.ResolveParent(ctx, root, to)
	if err != nil {
		return err
	}
	return l.fs.Rename(ctx, metawire.RenameReq{Cred: root, SrcDir: sd.Ino, SrcName: sn, DstDir: dd.Ino, DstName: dn})
}

func (l *libOps) list(ctx context.Context, dir string) ([]string, error) {
	a, err := l.fs.Resolve(ctx, root, dir)
	if err != nil {
		return nil, err
	}
	var names []string
	cookie := uint64(0)
	for {
		r, err := l.fs.Readdir(ctx, root, a.Ino, cookie, 256, false)
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			if e.Name != "." && e.Name != ".." {
				names = append(names, e.Name)
			}
			cookie = e.Cookie
		}
		if r.EOF || len(r.Entries) == 0 {
			break
		}
	}
	sort.Strings(names)
	return names, nil
}

// posixOps goes through a FUSE mount with the os package (what an
// unmodified program does).
type posixOps struct {
	mnt string
}

// errNotMounted is the outcome of an operation during which the mount was
// down (killed, being restarted): the path then named the empty
// directory under the mountpoint, so its answer says nothing about Atoll.
var errNotMounted = errors.New("torture: the FUSE mount was down during the operation")

// fuseSuperMagic is statfs's f_type of a FUSE file system.
const fuseSuperMagic = 0x65735546

func (p *posixOps) mounted() bool {
	var st syscall.Statfs_t
	return syscall.Statfs(p.mnt, &st) == nil && st.Type == fuseSuperMagic
}

// guard runs op and turns its outcome unknown unless the mount was up
// before and after it.
func (p *posixOps) guard(op func() error) error {
	if !p.mounted() {
		return errNotMounted
	}
	err := op()
	if !p.mounted() {
		return errNotMounted
	}
	return err
}

func (p *posixOps) name() string          { return "fuse" }
func (p *posixOps) at(path string) string { return pathpkg.Join(p.mnt, path) }

func (p *posixOps) create(_ context.Context, path string, data []byte) error {
	return p.guard(func() error { return p.createNow(path, data) })
}

func (p *posixOps) createNow(path string, data []byte) error {
	f, err := os.OpenFile(p.at(path), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return writeSyncClose(f, 0, data)
}

// writeSyncClose writes data at off, fsyncs and closes f (closing it on
// every path).
func writeSyncClose(f *os.File, off int64, data []byte) error {
	if _, err := f.WriteAt(data, off); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (p *posixOps) createOpen(_ context.Context, path string) (func(context.Context, []byte) error, error) {
	f, err := os.OpenFile(p.at(path), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return func(_ context.Context, data []byte) error {
		if data == nil {
			return f.Close()
		}
		return writeSyncClose(f, 0, data)
	}, nil
}

func (p *posixOps) overwrite(_ context.Context, path string, off int64, data []byte) error {
	return p.guard(func() error { return p.overwriteNow(path, off, data) })
}

func (p *posixOps) overwriteNow(path string, off int64, data []byte) error {
	f, err := os.OpenFile(p.at(path), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return writeSyncClose(f, off, data)
}

func (p *posixOps) read(ctx context.Context, path string) ([]byte, error) {
	var b []byte
	err := p.guard(func() (err error) {
		b, err = p.readNow(path)
		return err
	})
	return b, err
}

func (p *posixOps) readNow(path string) ([]byte, error) {
	f, err := os.Open(p.at(path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read after open: %w", err)
	}
	return b, nil
}

func (p *posixOps) unlink(_ context.Context, path string) error {
	return p.guard(func() error { return syscall.Unlink(p.at(path)) })
}

func (p *posixOps) mkdir(_ context.Context, path string) error {
	return syscall.Mkdir(p.at(path), 0o755)
}

func (p *posixOps) rmdir(_ context.Context, path string) error {
	return syscall.Rmdir(p.at(path))
}

func (p *posixOps) rename(_ context.Context, from, to string) error {
	return syscall.Rename(p.at(from), p.at(to))
}

func (p *posixOps) list(_ context.Context, dir string) ([]string, error) {
	f, err := os.Open(p.at(dir))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// nfsOps goes through the NFS gateway with an NFSv3 client library (what
// an NFS client machine does), for the data workload. One connection,
// redialled after it breaks; operations are serialised on it.
type nfsOps struct {
	addr string
	cur  atomic.Pointer[nfsrpc.Client] // for close, which must not wait for a stuck call
	mu   struct {
		sync.Mutex
		rc  *nfsrpc.Client
		m   *nfsc.Mount
		tgt *nfsc.Target
	}
}

func (n *nfsOps) name() string { return "nfs" }

// quietNFSLog replaces go-nfs-client's logger, which prints every failed
// call and stray reply: the engine records outcomes itself.
type quietNFSLog struct{}

func (quietNFSLog) SetDebug(bool)         {}
func (quietNFSLog) Errorf(string, ...any) {}
func (quietNFSLog) Debugf(string, ...any) {}
func (quietNFSLog) Infof(string, ...any)  {}

func init() { nfsutil.DefaultLogger = quietNFSLog{} }

// with runs fn on a connected target; a failure that is no NFS status
// drops the connection so the next operation dials again.
func (n *nfsOps) with(fn func(v *nfsc.Target) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.tgt == nil {
		rc, err := nfsrpc.DialTCP("tcp", n.addr, false)
		if err != nil {
			return err
		}
		m := &nfsc.Mount{Client: rc}
		tgt, err := m.Mount("/", nfsrpc.NewAuthUnix("torture", 0, 0).Auth())
		if err != nil {
			rc.Close()
			return err
		}
		n.mu.rc, n.mu.m, n.mu.tgt = rc, m, tgt
		n.cur.Store(rc)
	}
	// The client library has no deadlines: a call to a hung gateway (or
	// whose reply was lost) would wait forever holding the connection.
	// Closing the connection ends it with an error, and the next call
	// dials again.
	rc := n.mu.rc
	t := time.AfterFunc(opTimeout-5*time.Second, func() { rc.Close() })
	defer t.Stop()
	err := fn(n.mu.tgt)
	var nerr *nfsc.Error
	if err != nil && !errors.As(err, &nerr) && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
		n.mu.rc.Close()
		n.mu.rc, n.mu.m, n.mu.tgt = nil, nil, nil
	}
	return err
}

func (n *nfsOps) close() {
	if rc := n.cur.Load(); rc != nil {
		rc.Close()
	}
}

func (n *nfsOps) create(_ context.Context, path string, data []byte) error {
	return n.with(func(v *nfsc.Target) error {
		if _, _, err := v.Lookup(path); err == nil {
			return syscall.EEXIST
		}
		f, err := v.OpenFile(path, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close() // COMMIT: durable
	})
}

func (n *nfsOps) createOpen(context.Context, string) (func(context.Context, []byte) error, error) {
	return nil, syscall.ENOTSUP
}

func (n *nfsOps) overwrite(_ context.Context, path string, off int64, data []byte) error {
	return n.with(func(v *nfsc.Target) error {
		f, err := v.OpenFile(path, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

func (n *nfsOps) read(_ context.Context, path string) ([]byte, error) {
	var b []byte
	err := n.with(func(v *nfsc.Target) error {
		// GETATTR first, as a Linux client does on open (close-to-open):
		// go-nfs-client's Open sends a LOOKUP only, whose attributes the
		// gateway may answer from its second of name caching.
		if _, err := v.Getattr(path); err != nil {
			return err
		}
		f, err := v.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		b, err = io.ReadAll(f)
		return err
	})
	return b, err
}

func (n *nfsOps) unlink(_ context.Context, path string) error {
	return n.with(func(v *nfsc.Target) error { return v.Remove(path) })
}

func (n *nfsOps) mkdir(_ context.Context, path string) error {
	return n.with(func(v *nfsc.Target) error { _, err := v.Mkdir(path, 0o755); return err })
}

func (n *nfsOps) rmdir(context.Context, string) error          { return syscall.ENOTSUP }
func (n *nfsOps) rename(context.Context, string, string) error { return syscall.ENOTSUP }
func (n *nfsOps) list(context.Context, string) ([]string, error) {
	return nil, syscall.ENOTSUP
}
