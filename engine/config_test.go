package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// A session timeout the brokers refuse fails at start, saying the allowed
// range, instead of retrying the join forever.
func TestSessionTimeoutOutsideBrokerRangeFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    string
	}{
		{"below the minimum", 7 * time.Second, "8s to 1m0s"},
		{"above the maximum", 2 * time.Minute, "8s to 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newKfakeRig(t, 1, kfake.BrokerConfigs(map[string]string{
				"group.min.session.timeout.ms": "8000", "group.max.session.timeout.ms": "60000"}))
			log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
			eng, err := engine.New(r.top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"), engine.WithLogger(log),
				engine.WithClock(r.clock), engine.WithRegisterer(prometheus.NewRegistry()), engine.WithSessionTimeout(tc.timeout))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err = eng.Run(ctx)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("want a configuration error at start, got %v after %s", err, time.Since(start))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.timeout.String()) || !strings.Contains(err.Error(), "--session-timeout") {
				t.Fatalf("the error must give the timeout, the allowed range (%s) and what to do: %v", tc.want, err)
			}
		})
	}
	// Inside the range, the same broker runs it.
	r := newKfakeRig(t, 1, kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "8000", "group.max.session.timeout.ms": "60000"}))
	reg := prometheus.NewRegistry()
	eng, err := engine.New(r.top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"),
		engine.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		engine.WithClock(r.clock), engine.WithRegisterer(reg), engine.WithSessionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	r.waitFor("the stage to join and own the partition", 30*time.Second, func() bool { return gauge(t, reg, "kandle_partitions_owned") == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Changelogs get a partition for every partition the input topic really has
// (not only what the topology declares), and an existing changelog that is
// not compacted, or has too few partitions, stops the start with what to do.
func TestChangelogTopicsMatchTheRealInput(t *testing.T) {
	run := func(t *testing.T, r *kfakeRig, top *topology.Topology) (*prometheus.Registry, error) {
		reg := prometheus.NewRegistry()
		eng, err := engine.New(top, engine.WithStateDir(t.TempDir()), engine.WithInstanceID("a"),
			engine.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
			engine.WithClock(r.clock), engine.WithRegisterer(reg), engine.WithSessionTimeout(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- eng.Run(ctx) }()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case err := <-done:
				cancel()
				return reg, err
			case <-deadline:
				cancel()
				t.Fatal("the engine neither failed nor owned the 3 partitions within 30s")
			case <-time.After(50 * time.Millisecond):
				if gauge(t, reg, "kandle_partitions_owned") == 3 {
					cancel()
					return reg, <-done
				}
			}
		}
	}
	// The topology says 1 partition; the broker's trades topic has 3.
	declared1 := func(r *kfakeRig) *topology.Topology {
		top, err := topology.Parse("idle.yaml", fmt.Appendf(nil, idleTopology, r.seeds[0], 1), topology.Registry{})
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	changelog := "idle.c1m.changelog"

	t.Run("created with the input's partitions", func(t *testing.T) {
		r := newKfakeRig(t, 3)
		if _, err := run(t, r, declared1(r)); err != nil {
			t.Fatal(err)
		}
		td, err := r.adm.ListTopics(context.Background(), changelog)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(td[changelog].Partitions); n != 3 {
			t.Fatalf("changelog has %d partitions, the input has 3", n)
		}
	})
	t.Run("not compacted", func(t *testing.T) {
		r := newKfakeRig(t, 3)
		if _, err := r.adm.CreateTopic(context.Background(), 3, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")}, changelog); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, r, declared1(r))
		if err == nil || !strings.Contains(err.Error(), "cleanup.policy") || !strings.Contains(err.Error(), changelog) {
			t.Fatalf("want an error naming the changelog and its cleanup.policy, got %v", err)
		}
	})
	t.Run("too few partitions", func(t *testing.T) {
		r := newKfakeRig(t, 3)
		if _, err := r.adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, changelog); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, r, declared1(r))
		if err == nil || !strings.Contains(err.Error(), "--partitions 3") || !strings.Contains(err.Error(), changelog) {
			t.Fatalf("want an error saying the changelog needs 3 partitions, got %v", err)
		}
	})
}
