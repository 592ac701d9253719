package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/sinks"
	"github.com/kandle/kandle/topology"
)

// sinkRegistry is the registry of shipped sink connectors.
func sinkRegistry() topology.Registry { return sinks.Registry() }

// buildSinks creates the connectors of t's sinks as engine options.
func buildSinks(ctx context.Context, e *env, t *topology.Topology, reg prometheus.Registerer) ([]engine.Option, error) {
	return sinks.Build(ctx, e.log, t, reg)
}
