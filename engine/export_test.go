package engine

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// WithEndTxnHook (tests only) makes h end every transaction of the Kafka
// stages instead of the session's End, to inject failures of EndTxn and of
// the abort after it.
func WithEndTxnHook(h func(ctx context.Context, sess *kgo.GroupTransactSession, try kgo.TransactionEndTry) (bool, error)) Option {
	return func(e *Engine) { e.endTxnHook = h }
}

// WithDropRevokeHook (tests only) hides the revokes for which h returns true
// from the Kafka stages, as kgo's transact session hides a second revoke
// that comes before the session's End.
func WithDropRevokeHook(h func(stage string) bool) Option {
	return func(e *Engine) { e.dropRevokeHook = h }
}

// RestoreEntries (tests only) gives a new processor of stage the state
// entries of one partition (keys as the processor wrote them, without the
// changelog's 'p'), as a restore of the partition does, and returns the
// error that restore would fail with.
func RestoreEntries(t *topology.Topology, stage string, entries map[string][]byte) error {
	g, err := buildGraph(t)
	if err != nil {
		return err
	}
	s, ok := g.byName[stage]
	if !ok {
		return fmt.Errorf("no processor %s", stage)
	}
	proc, err := s.newProcessor(true, processors.SystemClock{})
	if err != nil {
		return err
	}
	return (&Engine{}).startProcessor(proc, unitRef{ns: stage}, entries)
}
