package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/topology"
)

// sinkRegistry lists the sink connectors a topology may name. Each kind's
// Config struct is its one spec: YAML decoding, defaults, validation and
// docs/reference.md all come from its tags.
func sinkRegistry() topology.Registry {
	return topology.Registry{Sinks: map[string]topology.SinkKind{}}
}

// buildSinks creates the connector of every sink in t.
func buildSinks(ctx context.Context, e *env, t *topology.Topology, reg *prometheus.Registry) ([]engine.Option, error) {
	return nil, nil
}
