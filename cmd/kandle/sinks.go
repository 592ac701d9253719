package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/sinks"
	"github.com/kandle/kandle/topology"
)

// sinkRegistry is the registry of shipped sink connectors.
func sinkRegistry() topology.Registry { return sinks.Registry() }

// buildSinks creates the connectors of t's sinks as engine options.
// A sink whose store is not reachable yet is waited for; pr (may be nil)
// reports it not ready meanwhile.
func buildSinks(ctx context.Context, e *env, t *topology.Topology, reg prometheus.Registerer, pr *probe) ([]engine.Option, error) {
	return sinks.Build(ctx, e.log, t, reg, func(sink string, err error) {
		if pr != nil {
			pr.waiting(fmt.Sprintf("sink %s: store unreachable: %v", sink, err))
		}
	})
}
