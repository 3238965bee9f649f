package smb

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/atoll-fs/atoll/internal/client"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// LoadUsers reads the cluster's users file (none yet: no users) as root.
func LoadUsers(ctx context.Context, fs *client.FS) ([]User, error) {
	b, err := fs.ReadFile(ctx, metawire.Root, UsersPath)
	if errors.Is(err, metawire.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("smb: reading %s: %w", UsersPath, err)
	}
	return ParseUsers(b)
}

// SaveUsers replaces the cluster's users file: written beside it, made
// durable, renamed over it, so a gateway reads the old file or the new,
// never half of one. Two saves at once keep one of them (the CLI is the
// only writer; it reads, changes one user and saves).
func SaveUsers(ctx context.Context, fs *client.FS, us []User) error {
	for _, u := range us {
		if err := u.Validate(); err != nil {
			return err
		}
	}
	dir, err := fs.MkdirAll(ctx, metawire.Root, UsersDir, 0o700)
	if err != nil {
		return fmt.Errorf("smb: %s: %w", UsersDir, err)
	}
	tmp := path.Base(UsersPath) + ".new"
	f, err := fs.CreateFile(ctx, metawire.Root, path.Join(UsersDir, tmp), 0o600)
	if err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	b := FormatUsers(us)
	_, err = f.WriteAt(ctx, b, 0)
	if err == nil {
		err = f.Fsync(ctx)
	}
	f.Release()
	if err != nil {
		return fmt.Errorf("smb: writing the users: %w", err)
	}
	if err := fs.Rename(ctx, metawire.RenameReq{Cred: metawire.Root, SrcDir: dir.Ino, SrcName: tmp, DstDir: dir.Ino, DstName: path.Base(UsersPath)}); err != nil {
		return fmt.Errorf("smb: replacing the users: %w", err)
	}
	return nil
}
