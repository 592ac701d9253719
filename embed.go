// Package kandle holds the files kandle ships inside its binary: the
// example topologies under testdata/topologies, so `kandle demo` and
// `kandle run` without -t work on a fresh machine with nothing else.
package kandle

import "embed"

// Topologies holds testdata/topologies/*.yaml.
//
//go:embed testdata/topologies/*.yaml
var Topologies embed.FS
