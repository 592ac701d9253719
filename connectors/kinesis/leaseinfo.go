package kinesis

import (
	"context"
	"slices"
	"strings"
)

// LeaseInfo is one row of a lease table as a report shows it.
type LeaseInfo struct {
	Shard      string
	Parents    []string
	Owner      string // empty: free
	Counter    int64  // moves on every renewal
	Checkpoint string // a sequence number, TrimHorizon, Latest or ShardEnd
}

// ReadLeases returns every lease of table in namespace (see
// ConsumerConfig.LeaseNamespace), sorted by shard id, without
// taking or changing any (for `kandle offsets`). The checkpoints are the
// hints the live consumer writes after each commit; the engine's changelog
// holds the authoritative positions.
func ReadLeases(ctx context.Context, ddb DynamoAPI, table, namespace string) ([]LeaseInfo, error) {
	items, err := (&leaseTable{db: ddb, name: table, duration: defaultLeaseDuration, ns: namespace}).scan(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LeaseInfo, 0, len(items))
	for _, it := range items {
		out = append(out, LeaseInfo{Shard: it.ShardID, Parents: it.Parents, Owner: it.Owner, Counter: it.Counter, Checkpoint: it.Checkpoint})
	}
	slices.SortFunc(out, func(a, b LeaseInfo) int { return strings.Compare(a.Shard, b.Shard) })
	return out, nil
}
