package kafka

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The dev broker serves the group protocol with groupCoordinator, through
// kfake control functions, and kfake runs those before its own SASL check:
// on their own they would let a client that never logged in join a group.
// So a dev broker with SASL users listens through saslGate, which follows
// each connection's login in its bytes and closes a connection that sends
// any request but ApiVersions, SaslHandshake or SaslAuthenticate before its
// login succeeded — the rule kfake applies to the requests it serves
// itself. A login succeeds when the broker answers a SaslAuthenticate
// without an error and the answer is not the first step of a SCRAM
// exchange (which a second SaslAuthenticate completes); kfake closes the
// connection on a failed login. With TLS, the gate also terminates TLS,
// since it must read the Kafka requests inside.

// saslGate is the listener of a dev broker with SASL users.
type saslGate struct {
	net.Listener
	tls *tls.Config // nil: plaintext
}

func (g saslGate) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if g.tls != nil {
		c = tls.Server(c, g.tls)
	}
	return &gatedConn{Conn: c, auth: map[int32]int16{}}, nil
}

// errNotLoggedIn closes a connection that sent a request before its login.
var errNotLoggedIn = errors.New("kafka: dev broker: request before a successful SASL login")

// gatedConn is one client connection seen by saslGate. kfake reads requests
// with Read and writes each response frame with one Write.
type gatedConn struct {
	net.Conn

	mu       sync.Mutex
	loggedIn bool
	auth     map[int32]int16 // SaslAuthenticate requests waiting for their answer: correlation ID -> version

	// The request stream (Read is called by one goroutine): the header of
	// the current frame (size, key, version, correlation ID) and how many
	// bytes of the frame are still to come.
	hdr  [12]byte
	got  int
	left int
}

// Read passes the client's bytes on, unless they begin a request the
// client may not send before its login: then the connection is closed.
func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if gerr := c.requests(p[:n]); gerr != nil {
			c.Conn.Close()
			return 0, gerr
		}
	}
	return n, err
}

// requests follows the request frames in b.
func (c *gatedConn) requests(b []byte) error {
	for len(b) > 0 {
		if c.got < 4 { // the frame's size
			k := copy(c.hdr[c.got:4], b)
			c.got += k
			b = b[k:]
			if c.got == 4 {
				c.left = int(binary.BigEndian.Uint32(c.hdr[:4]))
			}
			continue
		}
		k := min(len(b), c.left)
		before := c.got
		if c.got < len(c.hdr) {
			c.got += copy(c.hdr[c.got:], b[:k])
		}
		c.left -= k
		b = b[k:]
		if before < 6 && c.got >= 6 {
			if err := c.check(kmsg.Key(binary.BigEndian.Uint16(c.hdr[4:6]))); err != nil {
				return err
			}
		}
		if before < len(c.hdr) && c.got == len(c.hdr) && kmsg.Key(binary.BigEndian.Uint16(c.hdr[4:6])) == kmsg.SASLAuthenticate {
			c.mu.Lock()
			c.auth[int32(binary.BigEndian.Uint32(c.hdr[8:12]))] = int16(binary.BigEndian.Uint16(c.hdr[6:8]))
			c.mu.Unlock()
		}
		if c.left <= 0 {
			c.got, c.left = 0, 0 // the frame is complete (one shorter than a header is kfake's to refuse)
		}
	}
	return nil
}

// check refuses a request of key before the login succeeded.
func (c *gatedConn) check(key kmsg.Key) error {
	switch key {
	case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loggedIn {
		return errNotLoggedIn
	}
	return nil
}

// Write passes the broker's response frames on, and notes a successful
// login in the answer to a SaslAuthenticate.
func (c *gatedConn) Write(p []byte) (int, error) {
	if len(p) >= 8 {
		corr := int32(binary.BigEndian.Uint32(p[4:8]))
		c.mu.Lock()
		version, ok := c.auth[corr]
		delete(c.auth, corr)
		c.mu.Unlock()
		if ok {
			c.answered(version, p[8:])
		}
	}
	return c.Conn.Write(p)
}

// answered reads a SaslAuthenticate response body (after the correlation
// ID) of the given request version.
func (c *gatedConn) answered(version int16, body []byte) {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = version
	if resp.IsFlexible() {
		if len(body) == 0 {
			return
		}
		body = body[1:] // the response header's empty tagged fields
	}
	if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != 0 {
		return
	}
	if bytes.HasPrefix(resp.SASLAuthBytes, []byte("r=")) {
		return // SCRAM server-first message: one more step
	}
	c.mu.Lock()
	c.loggedIn = true
	c.mu.Unlock()
}
