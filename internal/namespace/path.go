package namespace

import (
	"bytes"
	"fmt"
	"strings"
)

const (
	// MaxName is the longest directory entry name, in bytes (NAME_MAX).
	MaxName = 255
	// MaxPath is the longest pathname, in bytes (PATH_MAX).
	MaxPath = 4096
)

// ValidName reports whether name may be a directory entry: 1..MaxName
// bytes, no '/' and no NUL, and neither "." nor "..". Any other byte,
// including invalid UTF-8, is allowed, as in POSIX.
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrBadName)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrBadName, name)
	case len(name) > MaxName:
		return fmt.Errorf("%w: name of %d bytes (max %d)", ErrNameTooLong, len(name), MaxName)
	case strings.IndexByte(name, '/') >= 0:
		return fmt.Errorf("%w: %q contains '/'", ErrBadName, name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: %q contains NUL", ErrBadName, name)
	}
	return nil
}

// IsClean reports whether p is in canonical form: "/" or "/" followed by
// valid names separated by single slashes, at most MaxPath bytes. Only a
// clean path may be hashed by Bucket.
func IsClean(p string) bool {
	if len(p) == 0 || len(p) > MaxPath || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return false
			}
			continue
		}
		name := p[start:i]
		if name == "" || name == "." || name == ".." || len(name) > MaxName {
			return false
		}
		start = i + 1
	}
	return true
}

// Clean returns the canonical form of the absolute pathname p: repeated
// and trailing slashes and "." components are dropped and ".." removes the
// component before it ("/.." is "/"). The rewriting is lexical, like
// path.Clean: Clean never looks at the namespace, so a ".." after a
// symbolic link is not what the kernel would resolve. Clean rejects, with
// ErrBadPath, an empty or relative path or one containing NUL, and with
// ErrNameTooLong a path longer than MaxPath or with a component longer than
// MaxName (every component counts, even one a later ".." removes). An
// already clean path is returned as is, without allocating.
func Clean(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty path", ErrBadPath)
	case len(p) > MaxPath:
		return "", fmt.Errorf("%w: path of %d bytes (max %d)", ErrNameTooLong, len(p), MaxPath)
	case p[0] != '/':
		return "", fmt.Errorf("%w: %q is not absolute", ErrBadPath, p)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%w: %q contains NUL", ErrBadPath, p)
	}
	if IsClean(p) {
		return p, nil
	}
	buf := make([]byte, 0, len(p))
	for rest := p; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		switch {
		case name == "" || name == ".":
		case len(name) > MaxName:
			return "", fmt.Errorf("%w: component of %d bytes (max %d) in %.64q", ErrNameTooLong, len(name), MaxName, p)
		case name == "..":
			buf = buf[:max(bytes.LastIndexByte(buf, '/'), 0)]
		default:
			buf = append(buf, '/')
			buf = append(buf, name...)
		}
	}
	if len(buf) == 0 {
		return "/", nil
	}
	return string(buf), nil
}

// Join returns the clean path of entry name in the directory whose clean
// path is dir. It is how the naming layer builds the pathname hashed when a
// directory is created.
func Join(dir, name string) (string, error) {
	if !IsClean(dir) {
		return "", fmt.Errorf("%w: directory %.64q is not clean", ErrBadPath, dir)
	}
	if err := ValidName(name); err != nil {
		return "", err
	}
	if dir == "/" {
		dir = ""
	}
	if n := len(dir) + 1 + len(name); n > MaxPath {
		return "", fmt.Errorf("%w: path of %d bytes (max %d)", ErrNameTooLong, n, MaxPath)
	}
	return dir + "/" + name, nil
}

// SplitPath splits a clean path into its parent directory and last name:
// "/a/b" gives ("/a", "b"), "/a" gives ("/", "a") and "/" gives ("/", "").
// For a path that is not clean the result is unspecified but SplitPath does
// not panic.
func SplitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return "", p
	case i == 0:
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}
