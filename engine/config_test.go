package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kandle/kandle/engine"
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
