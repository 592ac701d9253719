package state

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// State directories are private to the user kandle runs as: the state holds
// every open candle of the instance, so other local users have no business
// reading it (and none writing it).
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// privateFS is the OS file system with the store's modes: directories 0700
// and files 0600 whatever the process umask allows. Pebble's own default
// creates files 0666 and directories 0755 (minus the umask).
type privateFS struct{ vfs.FS }

func (p privateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return p.private(p.FS.Create(name, c))(name)
}

func (p privateFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return p.private(p.FS.OpenReadWrite(name, c, opts...))(name)
}

func (p privateFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return p.private(p.FS.ReuseForWrite(oldname, newname, c))(newname)
}

func (p privateFS) MkdirAll(dir string, _ os.FileMode) error {
	if err := p.FS.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	return os.Chmod(dir, dirMode)
}

func (p privateFS) Lock(name string) (io.Closer, error) {
	l, err := p.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, fileMode); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restrict %s to mode %o: %w", name, fileMode, err)
	}
	return l, nil
}

// private returns a function that restricts name to fileMode once f is open.
func (p privateFS) private(f vfs.File, err error) func(name string) (vfs.File, error) {
	return func(name string) (vfs.File, error) {
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(name, fileMode); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("restrict %s to mode %o: %w", name, fileMode, err)
		}
		return f, nil
	}
}

// privateDir creates dir with mode 0700, or narrows an existing one to it.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("restrict state directory %s to mode 0700: %w (does another user own it?)", dir, err)
	}
	return nil
}
