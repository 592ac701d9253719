package s3parquet

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/kandle/kandle/topology/spec"
)

// Config is the s3parquet sink's YAML block. Its tags are the one list of
// fields: the topology package decodes, defaults, validates and documents
// them from here.
type Config struct {
	URL             string        `yaml:"url" required:"true" doc:"Where the lake lives: s3://bucket/prefix, or file:///absolute/dir for a local lake (writes are atomic renames)."`
	Endpoint        string        `yaml:"endpoint" doc:"Custom S3 endpoint URL (emulators such as s3rver, MinIO); empty uses AWS."`
	Region          string        `yaml:"region" default:"us-east-1" doc:"AWS region of the bucket."`
	PathStyle       bool          `yaml:"path_style" default:"false" doc:"Address the bucket as endpoint/bucket/key instead of bucket.endpoint/key (needed by most emulators)."`
	RowGroupRows    int           `yaml:"row_group_rows" default:"100000" doc:"Maximum rows per Parquet row group. Larger groups compress and scan better."`
	FlushRows       int           `yaml:"flush_rows" default:"10000" doc:"Flush when this many candles are buffered."`
	FlushBytes      int           `yaml:"flush_bytes" default:"16777216" doc:"Flush when the buffered candles take about this many bytes of memory."`
	FlushAge        time.Duration `yaml:"flush_age" default:"30s" doc:"Flush when the oldest buffered candle has waited this long (checked on each write; the engine also flushes before committing offsets)."`
	Concurrency     int           `yaml:"concurrency" default:"4" doc:"Objects read, merged and written in parallel during a flush."`
	RequestTimeout  time.Duration `yaml:"request_timeout" default:"30s" doc:"Time limit for one attempt at one object (GET, merge, PUT); a slower attempt is retried."`
	MaxBackoff      time.Duration `yaml:"max_backoff" default:"10s" doc:"Longest pause between retries of a failing write. Retries go on until the stage stops."`
	WriteCacheBytes int           `yaml:"write_cache_bytes" default:"67108864" doc:"Memory (estimated, about 200 bytes a candle) for the candles of the objects this sink wrote last. The next flush of such an object merges into them and writes with If-Match the ETag of that write, skipping the GET; if another writer changed the object meanwhile, the store refuses the write and the sink reads the object as without the cache. Least recently written objects are dropped first; an object larger than this is never kept (so 1 turns the cache off). Not used with unconditional_writes."`
	// UnconditionalWrites turns off the conditional PUTs that keep a
	// cut-off instance from overwriting the new owner's object.
	UnconditionalWrites bool `yaml:"unconditional_writes" default:"false" doc:"Write objects without If-Match / If-None-Match. Only for S3 stores that ignore conditional writes (such as s3rver) and with a single kandle instance: a rebalance can then lose candles (an instance cut off mid-write may overwrite the new owner's object). By default the sink checks at start that the store honours the conditions and refuses to start if it does not."`

	// Credentials overrides the AWS default credential chain (environment,
	// shared config and profiles, SSO, web identity / IRSA, container and
	// instance roles) for Go callers such as tests against an emulator. It
	// has no YAML key on purpose: secrets never sit in a topology file.
	Credentials aws.CredentialsProvider `yaml:"-"`
}

// withDefaults fills the fields a Go caller left at zero from the default
// tags, the same values a YAML block without them gets (a Config built in Go
// needs only URL).
func (c Config) withDefaults() Config {
	_ = spec.FillDefaults(&c)
	return c
}

// Validate returns what is wrong with c, each message saying how to fix it.
func (c *Config) Validate() []string {
	var bad []string
	if _, err := parseURL(c.URL); err != nil {
		bad = append(bad, err.Error())
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad = append(bad, fmt.Sprintf("endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4569", c.Endpoint))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"row_group_rows", c.RowGroupRows}, {"flush_rows", c.FlushRows}, {"flush_bytes", c.FlushBytes}, {"concurrency", c.Concurrency}, {"write_cache_bytes", c.WriteCacheBytes}} {
		if f.v < 0 {
			bad = append(bad, fmt.Sprintf("%s is %d: use a positive number (or leave it out for the default)", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"flush_age", c.FlushAge}, {"request_timeout", c.RequestTimeout}, {"max_backoff", c.MaxBackoff}} {
		if f.v < 0 {
			bad = append(bad, fmt.Sprintf("%s is %s: use a positive duration such as 30s (or leave it out for the default)", f.name, f.v))
		}
	}
	return bad
}

// location is a parsed Config.URL.
type location struct {
	bucket string // s3 only
	prefix string // s3: key prefix without slashes at either end
	dir    string // file only: absolute directory
}

func (l location) isFile() bool { return l.dir != "" }

func parseURL(raw string) (location, error) {
	if raw == "" {
		return location{}, fmt.Errorf("url is empty: set it to s3://bucket/prefix or file:///absolute/dir")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return location{}, fmt.Errorf("url %q: %w; want s3://bucket/prefix or file:///absolute/dir", raw, err)
	}
	switch u.Scheme {
	case "s3":
		if u.Host == "" {
			return location{}, fmt.Errorf("url %q has no bucket: write it as s3://bucket/prefix", raw)
		}
		return location{bucket: u.Host, prefix: strings.Trim(u.Path, "/")}, nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return location{}, fmt.Errorf("url %q: a file URL needs three slashes and an absolute path, like file:///var/lib/kandle/lake", raw)
		}
		if !filepath.IsAbs(u.Path) {
			return location{}, fmt.Errorf("url %q: the path must be absolute, like file:///var/lib/kandle/lake", raw)
		}
		return location{dir: filepath.Clean(u.Path)}, nil
	}
	return location{}, fmt.Errorf("url %q: unsupported scheme %q; use s3://bucket/prefix or file:///absolute/dir", raw, u.Scheme)
}
