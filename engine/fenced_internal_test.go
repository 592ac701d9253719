package engine

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A stage rejoins with a new producer only for errors a new InitProducerID
// cures; anything else stops kandle. The errors are wrapped the way the
// stage and franz-go wrap them (Begin after a fenced EndTxn).
func TestFencedProducerErrors(t *testing.T) {
	wrap := func(err error) error {
		return fmt.Errorf("stage c1m: begin transaction: %w",
			fmt.Errorf("producer ID has a fatal, unrecoverable error, err: %w", err))
	}
	for _, tc := range []struct {
		err    error
		rejoin bool
	}{
		{wrap(kerr.ProducerFenced), true},
		{wrap(kerr.InvalidProducerEpoch), true},
		{wrap(kerr.InvalidTxnState), true}, // a thawed zombie whose transaction the coordinator aborted
		{wrap(kerr.TransactionalIDAuthorizationFailed), false},
		{wrap(kerr.TopicAuthorizationFailed), false},
		{fmt.Errorf("stage c1m: commit state: disk full"), false},
	} {
		if got := isFencedProducer(tc.err); got != tc.rejoin {
			t.Errorf("isFencedProducer(%v) = %v, want %v", tc.err, got, tc.rejoin)
		}
	}
}
