package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kandle/kandle/topology"
)

// ClientOpts returns the kgo options that connect to the brokers the way the
// topology's kafka block says: TLS (system roots plus an optional CA, an
// optional client certificate) and SASL (PLAIN, SCRAM-SHA-256/512 or AWS MSK
// IAM). A zero cfg gives no options: plaintext without authentication.
//
// Every kgo client kandle makes for a topology's brokers must include these
// options, so one place decides how kandle authenticates. Everything that can
// be wrong locally — an unset password variable, an unreadable or mismatched
// certificate, a broken AWS config — is reported here, at startup, positioned
// at the key in the topology file; a wrong password or an untrusted broker
// certificate only shows when a client first connects.
func ClientOpts(cfg topology.KafkaClient) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if cfg.TLS.Enabled {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL.Mechanism != "" {
		m, err := saslMechanism(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsConfig builds the client TLS config. ServerName stays empty unless set:
// kgo then verifies each broker against the host it dials, which is what a
// cluster advertising several brokers needs.
func tlsConfig(cfg topology.KafkaClient) (*tls.Config, error) {
	t := cfg.TLS
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // InsecureSkipVerify only when the topology asks, documented as tests-only
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, cfg.Errorf([]string{"tls", "ca_file"}, "cannot read the CA file: %v (give the path of a PEM file, relative to the working directory)", err)
		}
		// Add to the system roots rather than replace them: a cluster whose
		// certificate a public CA signed keeps working if ca_file is stale.
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, cfg.Errorf([]string{"tls", "ca_file"}, "%s holds no PEM certificate (want -----BEGIN CERTIFICATE----- blocks)", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, cfg.Errorf([]string{"tls", "cert_file"}, "cannot load the client certificate %s with key %s: %v (both must be PEM, and the key must belong to the certificate)", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func saslMechanism(cfg topology.KafkaClient) (sasl.Mechanism, error) {
	s := cfg.SASL
	if s.Mechanism == "aws-msk-iam" {
		return mskIAM(cfg)
	}
	if s.Username == "" {
		return nil, cfg.Errorf([]string{"sasl"}, "mechanism %s needs username", s.Mechanism)
	}
	var pass string
	switch {
	case s.PasswordFile != "":
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, cfg.Errorf([]string{"sasl", "password_file"}, "cannot read the password file: %v; mount the secret there or use password_env", err)
		}
		if pass = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"); pass == "" {
			return nil, cfg.Errorf([]string{"sasl", "password_file"}, "%s is empty; write the password of %s into it", s.PasswordFile, s.Username)
		}
	case s.PasswordEnv == "":
		return nil, cfg.Errorf([]string{"sasl"}, "mechanism %s needs password_env, the name of the environment variable holding the password, or password_file", s.Mechanism)
	default:
		if pass = os.Getenv(s.PasswordEnv); pass == "" {
			return nil, cfg.Errorf([]string{"sasl", "password_env"}, "environment variable %s is unset or empty; export %s=<password of %s> before starting kandle",
				s.PasswordEnv, s.PasswordEnv, s.Username)
		}
	}
	switch s.Mechanism {
	case "plain":
		return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
	case "scram-sha-256":
		return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
	case "scram-sha-512":
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, cfg.Errorf([]string{"sasl", "mechanism"}, "unknown mechanism %q; use plain, scram-sha-256, scram-sha-512 or aws-msk-iam", s.Mechanism)
}

// mskIAM signs each SASL session with credentials from the AWS default
// chain. The chain's provider caches and refreshes them, so temporary role
// credentials keep working across reconnects for as long as kandle runs.
func mskIAM(cfg topology.KafkaClient) (sasl.Mechanism, error) {
	ac, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return nil, cfg.Errorf([]string{"sasl", "mechanism"}, "aws-msk-iam: loading the AWS config (AWS_PROFILE, ~/.aws/config): %v", err)
	}
	if ac.Credentials == nil {
		return nil, cfg.Errorf([]string{"sasl", "mechanism"}, "aws-msk-iam: the AWS config has no credential source; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with an IAM role")
	}
	return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
		c, err := ac.Credentials.Retrieve(ctx)
		if err != nil {
			return aws.Auth{}, fmt.Errorf("aws-msk-iam: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with an IAM role): %w", err)
		}
		return aws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
	}), nil
}

// CheckAuth makes one request through cl so that a client with TLS or SASL
// settings fails at startup, with an explanation in terms of the topology,
// instead of retrying a rejected handshake for half a minute and then
// reporting a bare "EOF". Without TLS or SASL it does nothing: there is
// nothing to explain, and a broker that is still starting is retried as
// usual.
func CheckAuth(ctx context.Context, cl *kgo.Client, cfg topology.KafkaClient) error {
	if !cfg.Secured() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return Explain(cl.Ping(ctx), cfg)
}

// Explain adds to a connection error what in the kafka block most likely
// causes it: an untrusted or mismatched broker certificate, a rejected SASL
// login, TLS on one side only. Other errors (and nil) come back unchanged.
func Explain(err error, cfg topology.KafkaClient) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		firstEOF  *kgo.ErrFirstReadEOF
	)
	s := cfg.SASL
	hint := ""
	switch {
	case errors.As(err, &unknownCA):
		hint = "the broker's TLS certificate is signed by a CA kandle does not trust: set kafka.tls.ca_file to the PEM file of that CA"
		if cfg.TLS.CAFile != "" {
			hint = fmt.Sprintf("the broker's TLS certificate is not signed by a CA in %s (kafka.tls.ca_file) or the system roots: point ca_file at the CA that signed the broker's certificate", cfg.TLS.CAFile)
		}
	case errors.As(err, &hostname):
		hint = "the broker's TLS certificate does not carry the name kandle dialed: list brokers by a name the certificate holds, or set kafka.tls.server_name to it"
	case errors.As(err, &invalid):
		hint = "the broker's TLS certificate is not valid (expired, not yet valid, or not for servers)"
	case cfg.TLS.Enabled && tlsRefused(err) && cfg.TLS.CertFile == "":
		hint = "the broker refused the TLS handshake; if it requires client certificates (mutual TLS) set kafka.tls.cert_file and key_file"
	case cfg.TLS.Enabled && tlsRefused(err):
		hint = fmt.Sprintf("the broker refused the TLS handshake; check that it trusts the CA of the client certificate %s (kafka.tls.cert_file)", cfg.TLS.CertFile)
	case errors.As(err, &firstEOF):
		// kgo says at which step the broker hung up; say which key that means.
		switch msg := firstEOF.Error(); {
		case strings.Contains(msg, "TLS missing") && !cfg.TLS.Enabled:
			hint = "the broker requires TLS: add tls: {enabled: true} to the kafka block"
		case strings.Contains(msg, "TLS misconfigured") && cfg.TLS.Enabled:
			hint = "the broker closed the connection as TLS began: check that this port serves TLS, or remove kafka.tls"
		case strings.Contains(msg, "SASL missing") && s.Mechanism == "":
			hint = "the broker requires SASL: add a sasl block (mechanism, username, password_env) to kafka"
		default:
			return err
		}
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		hint = fmt.Sprintf("the broker does not offer SASL mechanism %s: set kafka.sasl.mechanism to one its listener enables (ask its operator which)", s.Mechanism)
	case s.Mechanism == "aws-msk-iam" && authFailure(err):
		hint = "AWS MSK IAM authentication failed: check that the AWS credentials kandle found may kafka-cluster:Connect to this cluster, and that brokers are the cluster's IAM endpoints (port 9098)"
	case s.Mechanism != "" && authFailure(err):
		hint = fmt.Sprintf("SASL %s login as %q failed (the broker rejected it or closed the connection): check kafka.sasl.username, the password in $%s, and that the broker's listener enables %s",
			s.Mechanism, s.Username, s.PasswordEnv, strings.ToUpper(s.Mechanism))
	default:
		return err
	}
	return fmt.Errorf("kafka: %s: %w", hint, err)
}

// Refused reports whether err is an answer that retrying cannot change:
// the brokers refused the client's TLS certificate checks, its SASL login
// or its permissions (ACLs), or refused a request as invalid (a topic's
// partitions, replication or configs). Such an error needs an operator;
// every other broker error (unreachable, timeouts, a broker starting or
// electing leaders, an unknown server error) may pass and is worth
// retrying.
func Refused(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	switch {
	case err == nil:
		return false
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return true
	}
	for _, code := range []error{kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState,
		kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.InvalidPartitions, kerr.InvalidReplicationFactor,
		kerr.InvalidReplicaAssignment, kerr.InvalidConfig, kerr.PolicyViolation, kerr.InvalidTopicException} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// tlsRefused reports whether the broker aborted the TLS handshake with an
// alert (crypto/tls returns those as a net.OpError "remote error").
func tlsRefused(err error) bool {
	var op *net.OpError
	var alert tls.AlertError
	return errors.As(err, &alert) || errors.As(err, &op) && op.Op == "remote error"
}

// authFailure reports whether err is what a client sees when the broker
// rejects its SASL login: Kafka answers SASL_AUTHENTICATION_FAILED, simpler
// brokers (kfake, some proxies) just close the connection.
func authFailure(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}
