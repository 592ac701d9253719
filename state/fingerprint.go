package state

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kandle/kandle/internal/invariant"
)

// kindFingerprint keys the fingerprint a stage's local state was written
// under; it sits in the stage's key range at partition -1 (no input
// partition has that number).
const kindFingerprint = 'f'

func fingerprintKey(stage string) []byte { return prefix(stage, -1, kindFingerprint) }

// Fingerprint returns the fingerprint recorded with SetFingerprint for
// stage's local state (ok=false when none was recorded).
func (s *Store) Fingerprint(stage string) ([]byte, bool, error) {
	v, closer, err := s.db.Get(fingerprintKey(stage))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read state fingerprint of %s: %w", stage, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// DropStage deletes all local state of stage in the batch: every input
// partition, and every Kinesis shard (kept under "stage/shard").
func (b *Batch) DropStage(stage string) {
	if invariant.Enabled {
		b.drop(stage)
	}
	_ = b.b.DeleteRange(append([]byte(stage), 0), append([]byte(stage), 1), nil)
	_ = b.b.DeleteRange(append([]byte(stage), '/'), append([]byte(stage), '/'+1), nil)
}

// SetFingerprint records the fingerprint stage's local state is written
// under (after a DropStage in the same batch, it survives the drop).
func (b *Batch) SetFingerprint(stage string, fp []byte) {
	_ = b.b.Set(fingerprintKey(stage), fp, nil)
}
