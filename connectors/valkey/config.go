package valkey

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Config is the YAML block of a valkey sink. Its tags are the one list of
// fields: the topology package decodes, validates and documents them.
type Config struct {
	Addrs        []string `yaml:"addrs" required:"true" doc:"Valkey/Redis server addresses as host:port (standalone primary; cluster mode is not supported yet)"`
	Username     string   `yaml:"username" default:"" doc:"ACL user name (leave empty for the default user)"`
	PasswordEnv  string   `yaml:"password_env" default:"" doc:"name of the environment variable holding the AUTH password (requirepass or the ACL user's password), e.g. VALKEY_PASSWORD; kandle stops at startup when it is unset or empty"`
	PasswordFile string   `yaml:"password_file" default:"" doc:"file holding the AUTH password (a mounted Kubernetes or Docker secret; one trailing newline is ignored); use instead of password_env"`
	// Password is the AUTH password for Go callers; New fills it from
	// PasswordEnv. Secrets never live in the topology file.
	Password              string        `yaml:"-"`
	DB                    int           `yaml:"db" default:"0" doc:"logical database number selected after connecting"`
	TLS                   bool          `yaml:"tls" default:"false" doc:"connect with TLS"`
	TLSCAFile             string        `yaml:"tls_ca_file" default:"" doc:"PEM file of CA certificates to trust besides the system roots (a private CA)"`
	TLSInsecureSkipVerify bool          `yaml:"tls_insecure_skip_verify" default:"false" doc:"accept any server certificate (testing only)"`
	Coalesce              time.Duration `yaml:"coalesce" default:"250ms" doc:"how often changed active candles are sent, newest per key only; 0 sends on every update"`
	ActiveTTL             time.Duration `yaml:"active_ttl" default:"0s" doc:"expiry of candle:active hashes; 0 means twice the candle's timeframe"`
	KeyPrefix             string        `yaml:"key_prefix" default:"" doc:"prefix for every key and channel, e.g. \"prod:\""`
	Timeout               time.Duration `yaml:"timeout" default:"5s" doc:"dial timeout and the limit of one round trip before it is retried"`
}

// DefaultConfig returns a Config with the documented defaults and addr as
// the only address.
func DefaultConfig(addr string) Config {
	return Config{Addrs: []string{addr}, Coalesce: 250 * time.Millisecond, Timeout: 5 * time.Second}
}

// Validate returns what is wrong with c, each message saying how to fix it.
func (c *Config) Validate() []string {
	var errs []string
	if len(c.Addrs) == 0 {
		errs = append(errs, "addrs: give at least one Valkey address as host:port, e.g. 127.0.0.1:6379")
	}
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Sprintf("addrs[%d]: %q is not host:port (e.g. 127.0.0.1:6379)", i, a))
		}
	}
	if c.DB < 0 {
		errs = append(errs, fmt.Sprintf("db: %d is negative; use 0 or a positive database number", c.DB))
	}
	if c.TLSInsecureSkipVerify && !c.TLS {
		errs = append(errs, "tls_insecure_skip_verify: only applies with tls: true; set tls: true or remove it")
	}
	if c.TLSCAFile != "" && !c.TLS {
		errs = append(errs, "tls_ca_file: only applies with tls: true; set tls: true or remove it")
	}
	if c.PasswordEnv != "" && c.PasswordFile != "" {
		errs = append(errs, "password_env and password_file: set one of them, not both")
	}
	if c.Username != "" && c.Password == "" && c.PasswordEnv == "" && c.PasswordFile == "" {
		errs = append(errs, "username: an ACL user needs a password; set password_env to the name of the environment variable holding it, or password_file to a file holding it")
	}
	if c.PasswordEnv != "" && !envName.MatchString(c.PasswordEnv) {
		errs = append(errs, "password_env: not an environment variable name (letters, digits and _); it names the variable holding the password, never the password itself")
	}
	if c.Coalesce < 0 {
		errs = append(errs, fmt.Sprintf("coalesce: %v is negative; use 0 (send every update) or e.g. 250ms", c.Coalesce))
	}
	if c.ActiveTTL < 0 {
		errs = append(errs, fmt.Sprintf("active_ttl: %v is negative; use 0 (twice the timeframe) or a duration", c.ActiveTTL))
	} else if c.ActiveTTL > 0 && c.ActiveTTL < time.Millisecond {
		errs = append(errs, "active_ttl: below 1ms; Valkey expiries have millisecond resolution")
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Sprintf("timeout: %v is negative; use e.g. 5s", c.Timeout))
	}
	return errs
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// resolvePassword fills Password from PasswordEnv or PasswordFile.
func (c *Config) resolvePassword() error {
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return fmt.Errorf("valkey: password_file: %w (mount the secret there, or use password_env)", err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			return fmt.Errorf("valkey: password_file: %s is empty; write the password into it", c.PasswordFile)
		}
		c.Password = v
		return nil
	}
	if c.PasswordEnv == "" {
		return nil
	}
	v := os.Getenv(c.PasswordEnv)
	if v == "" {
		return fmt.Errorf("valkey: password_env: environment variable %s is unset or empty; export %s=<password> before starting kandle", c.PasswordEnv, c.PasswordEnv)
	}
	c.Password = v
	return nil
}

func (c *Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

// clientOption maps c to valkey-go's options.
func (c *Config) clientOption() (valkey.ClientOption, error) {
	opt := valkey.ClientOption{
		InitAddress:      c.Addrs,
		Username:         c.Username,
		Password:         c.Password,
		SelectDB:         c.DB,
		DisableCache:     true, // we never read through the cache; skips CLIENT TRACKING
		ConnWriteTimeout: c.timeout(),
		ClientName:       "kandle",
	}
	opt.Dialer.Timeout = c.timeout()
	if c.TLS {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.TLSInsecureSkipVerify} //nolint:gosec // opt-in
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return opt, fmt.Errorf("valkey: tls_ca_file: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return opt, fmt.Errorf("valkey: tls_ca_file: %s holds no PEM certificate", c.TLSCAFile)
			}
			opt.TLSConfig.RootCAs = pool
		}
	}
	return opt, nil
}
