package testkit

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of one upstream address (a broker) that
// makes network trouble on demand: responses held back (Stall), every
// connection reset (Cut), all traffic held as in a network partition
// (Blackhole), or the upstream gone for good (Kill). Give each client its own
// proxy to hurt one client only. Bytes are held, never dropped or reordered,
// so a connection that outlives the trouble carries on where it was; a
// connection either side closes in the meantime is reset at once.
type Proxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string

	mu         sync.Mutex
	conns      map[*proxyConn]struct{}
	stallUntil time.Time // upstream→client bytes held until then
	holdUntil  time.Time // all bytes held until then
	killed     bool
	changed    chan struct{} // closed and replaced when a deadline changes
	kafka      bool          // rewrite broker addresses in responses to this proxy's

	wg sync.WaitGroup
}

type proxyConn struct {
	client, upstream net.Conn
	once             sync.Once
	done             chan struct{}

	mu       sync.Mutex
	inflight map[int32]kafkaReq // Kafka mode: correlation ID -> request
}

type kafkaReq struct{ key, version int16 }

// StartProxy listens on a free loopback port and forwards every connection
// to upstream. It is closed when the test ends. A Kafka client needs
// StartKafkaProxy: through this one only its bootstrap connection passes,
// and it dials the broker's advertised address for everything else.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	return startProxy(t, upstream, false)
}

// StartKafkaProxy is StartProxy for a single Kafka broker: it also rewrites
// the broker and coordinator addresses in Metadata, FindCoordinator and
// DescribeCluster responses to its own, so that a client bootstrapped
// through the proxy keeps every connection on it.
func StartKafkaProxy(t testing.TB, broker string) *Proxy {
	t.Helper()
	return startProxy(t, broker, true)
}

func startProxy(t testing.TB, upstream string, kafka bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, upstream: upstream, conns: map[*proxyConn]struct{}{}, changed: make(chan struct{}), kafka: kafka}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		killed := p.killed
		p.mu.Unlock()
		if killed {
			reset(c)
			continue
		}
		up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			reset(c)
			continue
		}
		pc := &proxyConn{client: c, upstream: up, done: make(chan struct{}), inflight: map[int32]kafkaReq{}}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(pc, c, up, false)
		go p.pipe(pc, up, c, true)
	}
}

// pipe copies src to dst, holding each chunk while the proxy says so.
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn, response bool) {
	defer p.wg.Done()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	if p.kafka {
		p.pipeFrames(pc, src, dst, response)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold(pc, response) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits while bytes in this direction are held; false means the
// connection was closed meanwhile.
func (p *Proxy) hold(pc *proxyConn, response bool) bool {
	for {
		p.mu.Lock()
		until := p.holdUntil
		if response && p.stallUntil.After(until) {
			until = p.stallUntil
		}
		changed := p.changed
		p.mu.Unlock()
		wait := time.Until(until)
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
		case <-pc.done:
			t.Stop()
			return false
		}
		t.Stop()
	}
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		close(pc.done)
		reset(pc.client)
		reset(pc.upstream)
	})
}

// reset closes c abruptly (RST rather than FIN), as a crashed peer or a
// dropped route does.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) setDeadline(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Stall holds every response (upstream→client byte) for d from now;
// requests still reach the upstream, which acts on them.
func (p *Proxy) Stall(d time.Duration) {
	p.setDeadline(func() { p.stallUntil = time.Now().Add(d) })
}

// Blackhole holds all traffic both ways for d from now, as a network
// partition does: nothing arrives, nothing is refused, and connections
// stay open unless a side gives up on them.
func (p *Proxy) Blackhole(d time.Duration) {
	p.setDeadline(func() { p.holdUntil = time.Now().Add(d) })
}

// Heal ends a stall or blackhole now.
func (p *Proxy) Heal() {
	p.setDeadline(func() { p.stallUntil, p.holdUntil = time.Time{}, time.Time{} })
}

// Cut resets every open connection at once; new connections are accepted
// as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.close()
	}
}

// Kill resets every connection and every later one: the client behind
// this proxy is cut off for good, as if its machine died (it cannot even
// say goodbye, e.g. leave its consumer group).
func (p *Proxy) Kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.Cut()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.Kill()
	_ = p.ln.Close()
	p.Heal()
	p.wg.Wait()
}
