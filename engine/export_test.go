package engine

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
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
