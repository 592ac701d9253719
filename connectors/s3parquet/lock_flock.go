//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package s3parquet

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock (flock) on name, creating the
// file if needed, and returns its release. The lock ends with the process
// too, so a crashed writer never leaves an object locked.
func lockFile(name string) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	return func() { f.Close() }, nil // closing the descriptor releases the lock
}
