// Package kandle holds the files kandle ships inside its binary: the
// example topologies under testdata/topologies, so `kandle demo` and
// `kandle run` without -t work on a fresh machine with nothing else.
package kandle

import "embed"

// Topologies holds the example topologies (not their tests).
//
//go:embed testdata/topologies/crypto.yaml testdata/topologies/crypto-sinks.yaml testdata/topologies/devices.yaml
var Topologies embed.FS
