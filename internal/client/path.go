package client

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// The path API, for the CLI and tests: absolute paths resolved component
// by component from the root, following symlinks in the middle of a path
// (at most 40, like Linux) but not at its end.

const maxSymlinks = 40

// Resolve returns the attributes of path (a final symlink is not followed).
func (f *FS) Resolve(ctx context.Context, cred metawire.Cred, path string) (metawire.Attr, error) {
	return f.resolve(ctx, cred, path, 0)
}

func (f *FS) resolve(ctx context.Context, cred metawire.Cred, path string, depth int) (metawire.Attr, error) {
	p, err := namespace.Clean(path)
	if err != nil {
		return metawire.Attr{}, fmt.Errorf("client: resolve %q: %w: %v", path, metawire.ErrInvalid, err)
	}
	cur, err := f.GetAttr(ctx, cred, f.Root())
	if err != nil {
		return cur, err
	}
	dir := "/"
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, name := range parts {
		if name == "" {
			continue
		}
		if !cur.IsDir() {
			return cur, fmt.Errorf("client: resolve %q: %w", path, metawire.ErrNotDir)
		}
		next, err := f.Lookup(ctx, cred, cur.Ino, name)
		if err != nil {
			return next, fmt.Errorf("client: resolve %q: %w", path, err)
		}
		if next.IsSymlink() && i < len(parts)-1 {
			if depth >= maxSymlinks {
				return next, fmt.Errorf("client: resolve %q: %w", path, metawire.ErrLoop)
			}
			target, err := f.Readlink(ctx, cred, next.Ino)
			if err != nil {
				return next, err
			}
			if !strings.HasPrefix(target, "/") {
				target = dir + "/" + target
			}
			rest := strings.Join(parts[i+1:], "/")
			return f.resolve(ctx, cred, target+"/"+rest, depth+1)
		}
		cur = next
		dir = strings.TrimSuffix(dir, "/") + "/" + name
	}
	return cur, nil
}

// ResolveParent returns the attributes of path's parent directory and the
// final name.
func (f *FS) ResolveParent(ctx context.Context, cred metawire.Cred, path string) (metawire.Attr, string, error) {
	p, err := namespace.Clean(path)
	if err != nil {
		return metawire.Attr{}, "", fmt.Errorf("client: %q: %w: %v", path, metawire.ErrInvalid, err)
	}
	if p == "/" {
		return metawire.Attr{}, "", fmt.Errorf("client: %q: %w: the root has no parent", path, metawire.ErrInvalid)
	}
	dir, name := namespace.SplitPath(p)
	d, err := f.Resolve(ctx, cred, dir)
	if err != nil {
		return d, "", err
	}
	if !d.IsDir() {
		return d, "", fmt.Errorf("client: %q: %w", dir, metawire.ErrNotDir)
	}
	return d, name, nil
}

// MkdirAll creates path and any missing parents with mode.
func (f *FS) MkdirAll(ctx context.Context, cred metawire.Cred, path string, mode uint32) (metawire.Attr, error) {
	p, err := namespace.Clean(path)
	if err != nil {
		return metawire.Attr{}, fmt.Errorf("client: mkdir %q: %w: %v", path, metawire.ErrInvalid, err)
	}
	cur, err := f.GetAttr(ctx, cred, f.Root())
	if err != nil {
		return cur, err
	}
	for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := f.Lookup(ctx, cred, cur.Ino, name)
		if err != nil {
			r, cerr := f.Mkdir(ctx, metawire.CreateReq{Cred: cred, Dir: cur.Ino, Name: name, Mode: mode})
			if cerr != nil && !isExist(cerr) {
				return next, cerr
			}
			if cerr == nil {
				next = r.Attr
			} else if next, err = f.Lookup(ctx, cred, cur.Ino, name); err != nil {
				return next, err
			}
		}
		if !next.IsDir() {
			return next, fmt.Errorf("client: mkdir %q: %w", path, metawire.ErrNotDir)
		}
		cur = next
	}
	return cur, nil
}

func isExist(err error) bool { return metawire.Errno(err) == metawire.Errno(metawire.ErrExists) }

// CreateFile creates (or truncates) path and opens it.
func (f *FS) CreateFile(ctx context.Context, cred metawire.Cred, path string, mode uint32) (*File, error) {
	dir, name, err := f.ResolveParent(ctx, cred, path)
	if err != nil {
		return nil, err
	}
	return f.createIn(ctx, cred, dir.Ino, name, mode)
}

// createIn creates (or truncates) name in dir and opens it.
func (f *FS) createIn(ctx context.Context, cred metawire.Cred, dir uint64, name string, mode uint32) (*File, error) {
	r, err := f.Create(ctx, metawire.CreateReq{Cred: cred, Dir: dir, Name: name, Mode: mode})
	if err != nil {
		return nil, err
	}
	fh, err := f.OpenWithAttr(ctx, cred, r.Attr)
	if err != nil {
		return nil, err
	}
	if r.Existed && r.Attr.Size > 0 {
		if err := fh.Truncate(ctx, 0); err != nil {
			return nil, err
		}
	}
	return fh, nil
}

// OpenPath opens the regular file at path.
func (f *FS) OpenPath(ctx context.Context, cred metawire.Cred, path string) (*File, error) {
	a, err := f.Resolve(ctx, cred, path)
	if err != nil {
		return nil, err
	}
	return f.Open(ctx, cred, a.Ino)
}

// WriteFile writes data to path (created or truncated) and closes it. A
// new file of at most InlineMax bytes takes one island request
// (CreateWithData).
func (f *FS) WriteFile(ctx context.Context, cred metawire.Cred, path string, data []byte, mode uint32) error {
	dir, name, err := f.ResolveParent(ctx, cred, path)
	if err != nil {
		return err
	}
	if len(data) <= f.cfg.InlineMax {
		r, err := f.CreateWithData(ctx, metawire.CreateReq{Cred: cred, Dir: dir.Ino, Name: name, Mode: mode}, data)
		if err != nil || !r.Existed {
			return err
		}
	}
	fh, err := f.createIn(ctx, cred, dir.Ino, name, mode)
	if err != nil {
		return err
	}
	if _, err := fh.WriteAt(ctx, data, 0); err != nil {
		return err
	}
	return fh.Close(ctx)
}

// ReadFile reads the whole file at path.
func (f *FS) ReadFile(ctx context.Context, cred metawire.Cred, path string) ([]byte, error) {
	fh, err := f.OpenPath(ctx, cred, path)
	if err != nil {
		return nil, err
	}
	out := make([]byte, fh.Size())
	n, err := fh.ReadAt(ctx, out, 0)
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// Reader adapts a File to io.Reader for streaming copies.
func (h *File) Reader(ctx context.Context) io.Reader { return &fileReader{h: h, ctx: ctx} }

type fileReader struct {
	h   *File
	ctx context.Context
	off int64
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.h.ReadAt(r.ctx, p, r.off)
	r.off += int64(n)
	if err == nil && n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}
