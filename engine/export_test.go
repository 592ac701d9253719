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
