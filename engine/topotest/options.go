package topotest

import (
	"regexp"

	"github.com/kandle/kandle/topology"
)

// Option configures Load and Runner.
type Option func(*config)

type config struct {
	reg     topology.Registry
	run     *regexp.Regexp
	verbose bool
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithRegistry sets the sink kinds a topology may name. Tests ignore sinks,
// but the topology must still parse; the default registry knows none.
func WithRegistry(reg topology.Registry) Option { return func(c *config) { c.reg = reg } }

// WithFilter runs only the tests whose full name ("file_test.yaml/test
// name") matches re.
func WithFilter(re *regexp.Regexp) Option { return func(c *config) { c.run = re } }

// WithVerbose makes a Runner print every test it runs and every candle and
// dead letter each produced.
func WithVerbose(v bool) Option { return func(c *config) { c.verbose = v } }
