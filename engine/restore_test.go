package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// scriptedPoller returns one scripted fetch per poll, then empty fetches
// (a quiet partition) until the test's deadline.
type scriptedPoller struct {
	fetches []kgo.Fetches
	polls   int
}

func (s *scriptedPoller) PollFetches(ctx context.Context) kgo.Fetches {
	s.polls++
	if len(s.fetches) > 0 {
		f := s.fetches[0]
		s.fetches = s.fetches[1:]
		return f
	}
	<-ctx.Done()
	return kgo.Fetches{}
}

func fetchOf(topic string, p int32, recs ...*kgo.Record) kgo.Fetches {
	for _, r := range recs {
		r.Topic, r.Partition = topic, p
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{{Partition: p, Records: recs}}}}}}
}

// A restore stops at the barrier's offset even when the barrier record is
// gone (compaction kept only a later barrier): it does not wait forever for
// a record that will never come, and it applies nothing written after it.
func TestReadChangelogStopsWithoutTheBarrier(t *testing.T) {
	const topic = "x.changelog"
	for _, tc := range []struct {
		name    string
		fetches []kgo.Fetches
		want    []int64 // offsets applied
	}{
		{"barrier present", []kgo.Fetches{
			fetchOf(topic, 0, &kgo.Record{Offset: 3, Key: []byte("pa")}),
			fetchOf(topic, 0, &kgo.Record{Offset: 5, Key: []byte("b")}, &kgo.Record{Offset: 6, Key: []byte("pz")}),
		}, []int64{3, 5}},
		{"barrier compacted away, a later barrier after it", []kgo.Fetches{
			fetchOf(topic, 0, &kgo.Record{Offset: 3, Key: []byte("pa")}),
			fetchOf(topic, 0, &kgo.Record{Offset: 9, Key: []byte("b")}),
		}, []int64{3}},
		{"only a transaction marker after the barrier's offset", []kgo.Fetches{
			fetchOf(topic, 0, &kgo.Record{Offset: 4, Key: []byte("pa")}),
			fetchOf(topic, 0, &kgo.Record{Offset: 7, Attrs: controlAttrs()}),
		}, []int64{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var got []int64
			err := readChangelogTo(ctx, &scriptedPoller{fetches: tc.fetches}, slog.Default(), topic, 0, 5, func(r *kgo.Record) error {
				got = append(got, r.Offset)
				return nil
			})
			if err != nil {
				t.Fatalf("the read did not stop at the barrier's offset: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("applied offsets %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("applied offsets %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func controlAttrs() kgo.RecordAttrs {
	return kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true})
}
