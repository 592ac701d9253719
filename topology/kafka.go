package topology

import (
	"fmt"
	"regexp"

	"github.com/kandle/kandle/topology/spec"
)

// Secured reports whether the config asks for TLS or SASL.
func (k KafkaClient) Secured() bool { return k.TLS.Enabled || k.SASL.Mechanism != "" }

// Errorf returns an error about the key at path under kafka (e.g.
// []string{"sasl", "password_env"}; nil for the block itself), positioned at that key in the topology file when the
// config was parsed from one. It is for problems only found at startup (an
// unset environment variable, an unreadable certificate), so they point at
// the line to look at like the problems of `kandle validate` do. The message
// should start with what is wrong, not with the key: Errorf prefixes it.
func (k KafkaClient) Errorf(path []string, format string, args ...any) error {
	key := "kafka"
	for _, p := range path {
		key += "." + p
	}
	msg := key + ": " + fmt.Sprintf(format, args...)
	switch {
	case k.file == "":
		return fmt.Errorf("%s", msg)
	case k.node == nil:
		return fmt.Errorf("%s: %s", k.file, msg)
	}
	// At the key, or the nearest one above it that the file has.
	return spec.At(k.file, spec.Find(k.node, path...), "%s", msg)
}

// envName is what a shell accepts as a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// kafka checks the kafka block: what the tags cannot say about TLS and SASL
// keys that only make sense together. Whether files exist and variables are
// set is checked at startup (kafka.ClientOpts), where they are used: the
// machine that validates is often not the one that runs.
func (c *checker) kafka() {
	k := &c.t.Kafka
	k.file, k.node = c.t.File, spec.Value(c.t.root, "kafka")
	if k.node == nil {
		return
	}
	tls := k.TLS
	if !tls.Enabled {
		for _, f := range []struct {
			key string
			set bool
		}{{"ca_file", tls.CAFile != ""}, {"cert_file", tls.CertFile != ""}, {"key_file", tls.KeyFile != ""},
			{"server_name", tls.ServerName != ""}, {"insecure_skip_verify", tls.InsecureSkipVerify}} {
			if f.set {
				c.report(c.at("kafka", "tls", f.key), "kafka.tls.%s: has no effect while TLS is off; add enabled: true to kafka.tls (or remove %s)", f.key, f.key)
			}
		}
	}
	switch {
	case tls.CertFile != "" && tls.KeyFile == "":
		c.report(c.at("kafka", "tls", "cert_file"), "kafka.tls.cert_file: needs key_file, the PEM private key of the client certificate (add key_file: <path>)")
	case tls.KeyFile != "" && tls.CertFile == "":
		c.report(c.at("kafka", "tls", "key_file"), "kafka.tls.key_file: needs cert_file, the PEM client certificate the key belongs to (add cert_file: <path>)")
	}

	s := k.SASL
	sasl := c.at("kafka", "sasl")
	switch s.Mechanism {
	case "":
		if spec.Value(sasl, "mechanism") != nil {
			return // an empty or invalid value: reported by the decoder
		}
		for _, f := range []struct{ key, val string }{{"username", s.Username}, {"password_env", s.PasswordEnv}, {"password_file", s.PasswordFile}} {
			if f.val != "" {
				c.report(c.at("kafka", "sasl", f.key), "kafka.sasl.%s: has no effect without a mechanism; add mechanism: plain, scram-sha-256 or scram-sha-512 to kafka.sasl", f.key)
			}
		}
		if s.AllowPlaintext {
			c.report(c.at("kafka", "sasl", "allow_plaintext"), "kafka.sasl.allow_plaintext: has no effect without a mechanism; remove it")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if s.Username == "" {
			c.report(sasl, "kafka.sasl: mechanism %s needs username (add username: <user>; on Confluent Cloud the API key)", s.Mechanism)
		}
		switch {
		case s.PasswordEnv != "" && s.PasswordFile != "":
			c.report(c.at("kafka", "sasl", "password_file"), "kafka.sasl.password_file: set password_env or password_file, not both")
		case s.PasswordFile != "":
		case s.PasswordEnv == "":
			c.report(sasl, "kafka.sasl: mechanism %s needs password_env, the name of the environment variable holding the password (add password_env: KAFKA_PASSWORD and export KAFKA_PASSWORD), or password_file, a file holding it", s.Mechanism)
		case !envName.MatchString(s.PasswordEnv):
			// Never echo the value: it may be the password itself.
			c.report(c.at("kafka", "sasl", "password_env"), "kafka.sasl.password_env: the value is not an environment variable name (letters, digits and _, not starting with a digit); write the NAME of the variable that holds the password, e.g. KAFKA_PASSWORD, never the password itself")
		}
		if !tls.Enabled && !s.AllowPlaintext {
			c.report(c.at("kafka", "sasl", "mechanism"), "kafka.sasl.mechanism: %s without TLS sends the credentials unencrypted; add tls: {enabled: true} to kafka (SASL_SSL listeners), or, only on a trusted private network, add allow_plaintext: true to kafka.sasl", s.Mechanism)
		}
	case "aws-msk-iam":
		for _, f := range []struct{ key, val string }{{"username", s.Username}, {"password_env", s.PasswordEnv}, {"password_file", s.PasswordFile}} {
			if f.val != "" {
				c.report(c.at("kafka", "sasl", f.key), "kafka.sasl.%s: aws-msk-iam takes its credentials from the AWS default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an IAM role), not from the topology; remove %s", f.key, f.key)
			}
		}
		if !tls.Enabled {
			c.report(c.at("kafka", "sasl", "mechanism"), "kafka.sasl.mechanism: aws-msk-iam needs TLS (MSK's IAM listener, port 9098, accepts TLS only); add tls: {enabled: true} to kafka")
		}
	}
}
