package topology

import (
	"net"
	"net/url"
	"strings"

	"github.com/kandle/kandle/topology/spec"
)

// serve checks the serve section: the named sinks exist and are of the kind
// their role reads, and the limits make sense.
func (c *checker) serve() {
	t := c.t
	s := &t.Serve
	if spec.Value(t.root, "serve") == nil {
		return
	}
	for _, role := range []struct{ key, name, kind string }{
		{"hot", s.Hot, "dynamodb"}, {"cold", s.Cold, "s3parquet"}, {"live", s.Live, "valkey"},
		{"devices.readings", s.Devices.Readings, "dynamodb"}, {"devices.latest", s.Devices.Latest, "dynamodb"},
		{"devices.status", s.Devices.Status, "dynamodb"}, {"devices.history", s.Devices.History, "dynamodb"},
	} {
		if role.name == "" {
			continue
		}
		n := c.at(append([]string{"serve"}, strings.Split(role.key, ".")...)...)
		sk, ok := t.Sinks[role.name]
		switch {
		case !ok:
			c.report(n, "serve.%s: no sink named %q%s", role.key, role.name, c.suggest(role.name, t.order.sinks, "sinks"))
		case sk.Kind != role.kind:
			c.report(n, "serve.%s: sink %q is a %s sink; %s reads a %s sink", role.key, role.name, sk.Kind, role.key, role.kind)
		}
	}
	if (s.Devices.Status == "") != (s.Devices.StatusIndex == "") {
		c.report(c.at("serve", "devices"), "serve.devices: status and status_index go together (the status sink and the GSI of its table on the level attribute)")
	}
	if s.Devices.Latest != "" && s.Devices.Readings == "" {
		c.report(c.at("serve", "devices", "latest"), "serve.devices.latest: set serve.devices.readings too (the readings by time come from it)")
	}
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		c.report(c.at("serve", "listen"), "serve.listen: %q is not host:port (e.g. 127.0.0.1:8080, or :8080 for every interface)", s.Listen)
	}
	if s.HotHorizon < 0 {
		c.report(c.at("serve", "hot_horizon"), "serve.hot_horizon: %v is negative; use the hot table's TTL (e.g. 168h) or 0", s.HotHorizon)
	}
	if s.HotHorizon > 0 && (s.Hot == "" || s.Cold == "") {
		c.report(c.at("serve", "hot_horizon"), "serve.hot_horizon: splits ranges between hot and cold, so set both serve.hot and serve.cold (or remove it)")
	}
	if s.MaxLimit < 1 {
		c.report(c.at("serve", "max_limit"), "serve.max_limit: %d; use a positive number such as 1000", s.MaxLimit)
	}
	if s.DefaultLimit < 1 || (s.MaxLimit >= 1 && s.DefaultLimit > s.MaxLimit) {
		c.report(c.at("serve", "default_limit"), "serve.default_limit: %d; use a number between 1 and max_limit (%d)", s.DefaultLimit, s.MaxLimit)
	}
	if s.MaxRangeWindows < 1 {
		c.report(c.at("serve", "max_range_windows"), "serve.max_range_windows: %d; use a positive number such as 1000000", s.MaxRangeWindows)
	}
	if s.AuthTokenEnv != "" && !envName.MatchString(s.AuthTokenEnv) {
		c.report(c.at("serve", "auth_token_env"), "serve.auth_token_env: %q is not an environment variable name; it names the variable holding the token, never the token itself", s.AuthTokenEnv)
	}
	for i, o := range s.CORSOrigins {
		if o == "*" {
			continue
		}
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			c.report(c.at("serve", "cors_origins"), "serve.cors_origins[%d]: %q is not an origin; write scheme://host[:port] such as https://charts.example.com, or \"*\"", i, o)
		}
	}
	for _, d := range []struct {
		key string
		v   int64
	}{{"read_timeout", int64(s.ReadTimeout)}, {"write_timeout", int64(s.WriteTimeout)}, {"idle_timeout", int64(s.IdleTimeout)},
		{"store_timeout", int64(s.StoreTimeout)}, {"write_wait", int64(s.WriteWait)}, {"ping_interval", int64(s.PingInterval)},
		{"max_subscriptions", int64(s.MaxSubscriptions)}, {"client_queue", int64(s.ClientQueue)}, {"max_message_bytes", s.MaxMessageBytes}} {
		if d.v <= 0 {
			c.report(c.at("serve", d.key), "serve.%s: must be positive (every server has a limit); leave it out for the default", d.key)
		}
	}
}
