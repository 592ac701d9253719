package state

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The state directory (created, or found with looser modes) and everything
// Pebble writes in it are private to the user, even under a permissive
// umask: directories 0700, files 0600.
func TestStateIsPrivate(t *testing.T) {
	old := syscall.Umask(0) // the loosest umask: nothing is masked for us
	defer syscall.Umask(old)
	root := t.TempDir()
	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(root, "new", "state"), existing} {
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := s.NewBatch()
		b.Set("1m", 0, []byte("BTC"), []byte("open window"))
		b.SetMeta("1m", 0, Meta{ChangelogOffset: 1, InputOffset: 2})
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil { // an sstable too, not only the WAL
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		files := 0
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			want := fileMode
			if d.IsDir() {
				want = dirMode
			} else {
				files++
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %o, want %o", p, got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if files < 3 {
			t.Fatalf("%s holds %d files; want Pebble's WAL, manifest and tables checked", dir, files)
		}
	}
}
