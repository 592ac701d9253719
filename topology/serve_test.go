package topology

import (
	"strings"
	"testing"
)

// TestServeSection: the serve section's names must be sinks of the kind
// their role reads, and its limits and origins must make sense; every
// problem is reported with its position.
func TestServeSection(t *testing.T) {
	const base = `name: t
brokers: embedded
sources:
  trades: {topic: trades}
processors:
  c1m: {kind: candles, from: trades, timeframe: 1m}
sinks:
  hist: {kind: fake, from: [c1m], table: t}
`
	ok := base + "serve:\n  listen: 127.0.0.1:9000\n  max_limit: 50\n  default_limit: 20\n"
	top, err := Parse("ok.yaml", []byte(ok), testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if top.Serve.Listen != "127.0.0.1:9000" || top.Serve.MaxLimit != 50 || top.Serve.ClientQueue != 256 {
		t.Fatalf("serve: %+v", top.Serve)
	}
	bad := base + `serve:
  hot: hst
  live: hist
  listen: nope
  max_limit: 10
  default_limit: 20
  hot_horizon: 1h
  cors_origins: ["ftp://x", "*"]
  auth_token_env: "my token"
  ping_interval: 0s
  devices: {status: hist, latest: hist}
`
	_, err = Parse("bad.yaml", []byte(bad), testRegistry())
	if err == nil {
		t.Fatal("an invalid serve section parsed")
	}
	for _, want := range []string{
		`bad.yaml:10:8: serve.hot: no sink named "hst" (did you mean hist?)`,
		`bad.yaml:11:9: serve.live: sink "hist" is a fake sink; live reads a valkey sink`,
		`serve.listen: "nope" is not host:port`,
		`serve.default_limit: 20; use a number between 1 and max_limit (10)`,
		`serve.hot_horizon: splits ranges between hot and cold`,
		`serve.cors_origins[0]: "ftp://x" is not an origin`,
		`serve.auth_token_env: "my token" is not an environment variable name`,
		`serve.ping_interval: must be positive`,
		`serve.devices.status: sink "hist" is a fake sink; devices.status reads a dynamodb sink`,
		`serve.devices: status and status_index go together`,
		`serve.devices.latest: set serve.devices.readings too`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), `cors_origins[1]`) {
		t.Errorf("\"*\" is a valid origin:\n%v", err)
	}
}
