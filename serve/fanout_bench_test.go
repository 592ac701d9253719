package serve

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/topology"
	"github.com/kandle/kandle/topology/spec"
)

// The fan-out benchmark runs its server and its clients in child processes
// (this test binary again, told what to be by fanoutServerEnv or
// fanoutClientEnv), so that each holds one end of every connection and
// stays within a process's open-files limit. Where that limit is lower
// than the clients asked for (and cannot be raised), the clients are split
// into shards of one server process and one client process each; the
// benchmark publishes every update to all of them.

const (
	// fanoutServerEnv makes the child a server for the number of clients it
	// holds: it serves the stream from an in-memory feed and exposes
	// /bench/publish, /bench/mem and /bench/profile until stdin closes.
	fanoutServerEnv = "KANDLE_FANOUT_SERVER"
	// fanoutClientEnv makes the child a shard of clients:
	// "url clients shard arrivals-file".
	fanoutClientEnv = "KANDLE_FANOUT_CLIENT"
	// fanoutClientsEnv sets how many clients BenchmarkStreamFanout connects
	// (default 10,000).
	fanoutClientsEnv = "KANDLE_FANOUT_CLIENTS"
	// fanoutProfileEnv is the prefix of the CPU profiles of the timed loop,
	// prefix.server.N and prefix.clients.N for shard N (-cpuprofile would
	// profile only the benchmark's own process, which only directs).
	fanoutProfileEnv = "KANDLE_FANOUT_CPUPROFILE"
)

// fanoutSpareFiles is what a fan-out process keeps of its open-files
// limit for other than the clients' connections.
const fanoutSpareFiles = 1024

// fanoutPerSource is the most clients one shard has: they dial from one
// loopback source address of their own (127.0.0.2 for the first shard,
// 127.0.0.3 ...), whose ephemeral ports (about 28,000 by default) they
// share with nothing else on the machine.
const fanoutPerSource = 20_000

// fanoutSample: one client in this many parses its frames.
const fanoutSample = 100

// fanoutDialers is how many clients of a shard connect at once.
const fanoutDialers = 64

// TestMain turns this test binary into one of the fan-out benchmark's
// processes when it is started as one.
func TestMain(m *testing.M) {
	var err error
	switch {
	case os.Getenv(fanoutServerEnv) != "":
		err = fanoutServer(os.Getenv(fanoutServerEnv))
	case os.Getenv(fanoutClientEnv) != "":
		err = fanoutClientShard(os.Getenv(fanoutClientEnv))
	default:
		os.Exit(m.Run())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fileLimit raises the process's open-files limit towards n (the hard
// limit too when it is lower, which takes CAP_SYS_RESOURCE) and returns
// the limit it has.
func fileLimit(n uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("open files limit: %w", err)
	}
	if lim.Cur >= n {
		return lim.Cur, nil
	}
	if lim.Max < n && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
		return n, nil
	}
	lim.Cur = min(n, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("open files limit %d: %w", lim.Cur, err)
	}
	return lim.Cur, nil
}

// needFiles fails unless the process may hold n connections.
func needFiles(n int) error {
	got, err := fileLimit(uint64(n + fanoutSpareFiles))
	if err != nil {
		return err
	}
	if got < uint64(n+fanoutSpareFiles) {
		return fmt.Errorf("open files: %d needed for %d connections, the limit is %d", n+fanoutSpareFiles, n, got)
	}
	return nil
}

// fanoutServer serves clients connections until stdin closes.
func fanoutServer(arg string) error {
	clients, err := strconv.Atoi(arg)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", fanoutServerEnv, arg, err)
	}
	if err := needFiles(clients); err != nil {
		return err
	}
	mem := NewMemory(10)
	m1, _ := candle.ParseTimeframe("1m", nil)
	var cfg topology.Serve
	if err := spec.FillDefaults(&cfg); err != nil {
		return err
	}
	cfg.ClientQueue = 1024
	// Pings keep idle connections alive; they are not the fan-out. On the
	// loaded development VM, while 50,000 clients connected (for minutes)
	// some were dropped, most likely for a pong missed within the default
	// 20 s, so the benchmark pings every 5 minutes.
	cfg.PingInterval = 5 * time.Minute
	// Why a client is disconnected goes to stderr (a run then fails).
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := New(Options{Config: cfg, Timeframes: map[string]candle.Timeframe{"1m": m1}, Live: mem, Feed: mem, Log: log})
	if err != nil {
		return err
	}
	mem.Active(series("BTC/USDT", m1, 0, 1, 1)[0])
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler())
	var seq atomic.Int64
	seq.Store(1)
	mux.HandleFunc("/bench/publish", func(w http.ResponseWriter, r *http.Request) {
		c := series("BTC/USDT", m1, seq.Add(1)*60_000, 1, 1)[0]
		c.Trades = time.Now().UnixMicro() // the send time, for the delivery delay
		mem.Active(c)
	})
	var profMu sync.Mutex
	var prof *os.File
	mux.HandleFunc("/bench/profile", func(w http.ResponseWriter, r *http.Request) {
		profMu.Lock()
		defer profMu.Unlock()
		if to := r.URL.Query().Get("to"); to != "" {
			f, err := os.Create(to)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			prof = f
			return
		}
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
	})
	mux.HandleFunc("/bench/cpu", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, cpuTime())
	})
	mux.HandleFunc("/bench/mem", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(w, "%d %d %d\n", ms.HeapInuse+ms.StackInuse, runtime.NumGoroutine(), ms.StackInuse)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // the benchmark's -timeout ends it sooner
	var wg sync.WaitGroup
	wg.Go(func() { s.hub.run(ctx) })
	srv := httptest.NewServer(mux)
	fmt.Printf("FANOUT-URL %s\n", srv.URL)
	_, _ = io.Copy(io.Discard, os.Stdin) // the benchmark closes stdin to stop us
	cancel()
	wg.Wait()
	srv.CloseClientConnections()
	srv.Close()
	return nil
}

// cpuTime is the process's CPU time so far (user and system), in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// fanoutChild is one of the benchmark's child processes: what it prints,
// line by line, and its stdin.
type fanoutChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // closed when the child's stdout ends
}

func startFanoutChild(b *testing.B, env string) *fanoutChild {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &fanoutChild{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() { // ends with the child's stdout, which Wait closes at the latest
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	b.Cleanup(func() { p.stdin.Close(); _ = p.cmd.Wait() })
	return p
}

// expect waits for the child's next line, which must start with prefix,
// and returns the rest of it.
func (p *fanoutChild) expect(ctx context.Context, b *testing.B, prefix string) string {
	select {
	case l, ok := <-p.lines:
		if !ok {
			b.Fatalf("a fan-out process ended while the benchmark waited for %q", prefix)
		}
		rest, found := strings.CutPrefix(l, prefix)
		if !found {
			b.Fatalf("a fan-out process said %q, the benchmark waited for %q", l, prefix)
		}
		return rest
	case <-ctx.Done():
		b.Fatalf("no %q from a fan-out process: %v", prefix, ctx.Err())
		return ""
	}
}

// BenchmarkStreamFanout: 10,000 WebSocket clients (KANDLE_FANOUT_CLIENTS
// sets another number) on loopback subscribed to one series; each
// iteration publishes one update and waits until every client has it.
// Reports messages/s, p50 and p99 delivery delay, the CPU time the servers
// and the clients spent per message in the timed loop (which, unlike the
// rate, does not move with other processes' load), server memory per
// client (heap and stacks in use, and the stacks alone),
// and how many server processes shared the clients (more than one only
// where a process may not hold them all: see fanoutChild).
//
// The clients share the two cores with the server, so they do as little as
// a client can: they count frames (the subscription's reply, the snapshot,
// then one update per iteration) and note when each arrived, and only one
// client in fanoutSample parses every frame as JSON and checks it is the
// update published (series and window). A delay runs from just before the
// benchmark asks the servers to publish (an HTTP request each, sent at
// once) to the client's read of the frame. With KANDLE_FANOUT_CPUPROFILE
// set, the server and client processes each write a CPU profile of the
// timed loop.
func BenchmarkStreamFanout(b *testing.B) {
	clients := 10_000
	if v := os.Getenv(fanoutClientsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < fanoutSample {
			b.Fatalf("%s=%q: want a number of clients, at least %d", fanoutClientsEnv, v, fanoutSample)
		}
		clients = n
	}
	// Children inherit the limit raised here.
	limit, err := fileLimit(uint64(clients + fanoutSpareFiles))
	if err != nil {
		b.Fatal(err)
	}
	per := min(int(limit)-fanoutSpareFiles, fanoutPerSource)
	if per < fanoutSample {
		b.Fatalf("open files: the limit is %d, too low for the fan-out benchmark; raise it (ulimit -n)", limit)
	}
	shards := (clients + per - 1) / per
	if limit < uint64(clients+fanoutSpareFiles) {
		b.Logf("open files limited to %d per process (the hard limit): %d server processes share the %d clients", limit, shards, clients)
	}
	sizes := make([]int, shards)
	for k := range sizes {
		sizes[k] = clients / shards
		if k < clients%shards {
			sizes[k]++
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute) // the -timeout flag ends a run sooner
	defer cancel()
	servers := make([]*fanoutChild, shards)
	bases := make([]string, shards)
	for k := range servers {
		servers[k] = startFanoutChild(b, fanoutServerEnv+"="+strconv.Itoa(sizes[k]))
	}
	for k, p := range servers {
		bases[k] = p.expect(ctx, b, "FANOUT-URL ")
		go func() { // the rest of its output
			for range p.lines {
			}
		}()
	}
	get := func(k int, path string) (string, error) {
		resp, err := http.Get(bases[k] + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
		return string(body), err
	}
	// all asks every server at once.
	all := func(path string) []string {
		out := make([]string, shards)
		errs := make([]error, shards)
		var wg sync.WaitGroup
		for k := range shards {
			wg.Go(func() { out[k], errs[k] = get(k, path) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		return out
	}
	// memOf sums the servers' heap and stacks in use, goroutines and
	// stacks alone.
	memOf := func() (m int64, g int, st int64) {
		for _, s := range all("/bench/mem") {
			var mk, sk int64
			var gk int
			fmt.Sscan(s, &mk, &gk, &sk)
			m, g, st = m+mk, g+gk, st+sk
		}
		return m, g, st
	}
	mem0, _, stack0 := memOf()

	dir := b.TempDir()
	shardsOf := make([]*fanoutChild, shards)
	for k := range shardsOf {
		arg := fmt.Sprintf("%s %d %d %s", bases[k], sizes[k], k, filepath.Join(dir, fmt.Sprintf("arrivals.%d", k)))
		shardsOf[k] = startFanoutChild(b, fanoutClientEnv+"="+arg)
	}
	for _, p := range shardsOf { // every snapshot arrived: all subscribed
		p.expect(ctx, b, "READY")
	}
	mem1, goroutines, stack1 := memOf()
	// cpuOf sums the servers' CPU time.
	cpuOf := func() (ns int64) {
		for _, s := range all("/bench/cpu") {
			var c int64
			fmt.Sscan(s, &c)
			ns += c
		}
		return ns
	}
	for _, p := range shardsOf {
		fmt.Fprintln(p.stdin, "start")
	}
	prefix := os.Getenv(fanoutProfileEnv)
	if prefix != "" {
		for k := range shardsOf {
			if _, err := get(k, "/bench/profile?to="+url.QueryEscape(fmt.Sprintf("%s.server.%d", prefix, k))); err != nil {
				b.Fatal(err)
			}
		}
	}
	serverCPU0 := cpuOf()
	// b.Loop runs this function once, so the clients connect once.
	published := []int64{0} // unix ns before update i was asked for
	updates := 0
	for b.Loop() {
		updates++
		published = append(published, time.Now().UnixNano())
		all("/bench/publish")
		for _, p := range shardsOf {
			p.expect(ctx, b, "GOT "+strconv.Itoa(updates))
		}
	}
	elapsed := b.Elapsed()
	serverCPU := cpuOf()
	if prefix != "" {
		all("/bench/profile")
	}
	var delays []time.Duration
	var clientCPU int64
	for k, p := range shardsOf {
		fmt.Fprintln(p.stdin, "stop")
		var c int64
		fmt.Sscan(p.expect(ctx, b, "DONE "), &c)
		clientCPU += c
		raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("arrivals.%d", k)))
		if err != nil || len(raw) != 8*sizes[k]*updates {
			b.Fatalf("arrivals of shard %d: %d bytes for %d updates to %d clients, %v", k, len(raw), updates, sizes[k], err)
		}
		for j := range sizes[k] * updates { // client by client
			i := j%updates + 1
			delays = append(delays, time.Duration(int64(binary.LittleEndian.Uint64(raw[8*j:]))-published[i]))
		}
	}
	slices.Sort(delays)
	b.ReportMetric(float64(clients*updates)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-delay-ms")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-delay-ms")
	b.ReportMetric(float64(mem1-mem0)/float64(clients), "server-bytes/client")
	b.ReportMetric(float64(stack1-stack0)/float64(clients), "server-stack-bytes/client")
	b.ReportMetric(float64(goroutines), "server-goroutines")
	b.ReportMetric(float64(serverCPU-serverCPU0)/1000/float64(clients*updates), "server-cpu-us/msg")
	b.ReportMetric(float64(clientCPU)/1000/float64(clients*updates), "client-cpu-us/msg")
	b.ReportMetric(float64(clients), "clients")
	b.ReportMetric(float64(shards), "server-procs")
}

// fanoutClientShard connects a shard's clients to its server and reports
// on stdout: READY once every client has its snapshot, GOT i once every
// client has update i, or BAD and why. On "start" from stdin it notes its
// CPU time and starts its CPU profile (when fanoutProfileEnv is set); on
// "stop" it stops it, writes each update's arrival time at each client
// (unix ns, little-endian int64, client by client) and says DONE and the
// CPU time it spent since "start"; it ends when stdin closes.
func fanoutClientShard(arg string) error {
	var base, arrivalsTo string
	var n, shard int
	if _, err := fmt.Sscan(arg, &base, &n, &shard, &arrivalsTo); err != nil {
		return fmt.Errorf("%s=%q: %w", fanoutClientEnv, arg, err)
	}
	if err := needFiles(n); err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	// Each shard dials from a loopback address of its own. A socket bound
	// to an address with IP_BIND_ADDRESS_NO_PORT (Linux) takes its port at
	// connect, by the whole 4-tuple, so the previous run's ports in
	// TIME_WAIT are reused there.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+shard))}}
	if runtime.GOOS == "linux" {
		const ipBindAddressNoPort = 0x18
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); cerr != nil {
				return cerr
			}
			return err
		}
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	// Under load, connecting is mostly waiting for the server's turn on a
	// core, so the clients connect fanoutDialers at a time.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/stream"
	var received atomic.Int64
	arrivals := make([][]int64, n) // by client, update by update
	var bad atomic.Pointer[string]
	var wg sync.WaitGroup
	defer wg.Wait()
	conns := make([]*websocket.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
	}()
	watched, stop := make(chan struct{}), make(chan struct{})
	go func() { // reports progress; stops at "stop" or a failure
		defer close(watched)
		for i := 0; ; {
			if p := bad.Load(); p != nil {
				say("BAD %s", *p)
				return
			}
			if received.Load() >= int64(n*(i+1)) {
				if i == 0 {
					say("READY")
				} else {
					say("GOT %d", i)
				}
				i++
				continue
			}
			if ctx.Err() != nil && i == 0 {
				say("BAD only %d of %d clients subscribed", received.Load(), n)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	var next atomic.Int64
	var dialers sync.WaitGroup
	for range fanoutDialers {
		dialers.Go(func() {
			for ci := int(next.Add(1) - 1); ci < n && bad.Load() == nil; ci = int(next.Add(1) - 1) {
				c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: hc})
				if err == nil {
					conns[ci] = c
					err = c.Write(ctx, websocket.MessageText, []byte(subBTC))
				}
				if err != nil {
					s := fmt.Sprintf("client %d of shard %d: %v", ci, shard, err)
					bad.CompareAndSwap(nil, &s)
					return
				}
				wg.Go(func() { fanoutClient(c, ci, ci%fanoutSample == 0, &arrivals[ci], &received, &bad) })
			}
		})
	}
	dialers.Wait()
	var prof *os.File
	var cpu0 int64
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "start":
			cpu0 = cpuTime()
			prefix := os.Getenv(fanoutProfileEnv)
			if prefix == "" {
				continue
			}
			f, err := os.Create(fmt.Sprintf("%s.clients.%d", prefix, shard))
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return err
			}
			prof = f
		case "stop":
			cpu1 := cpuTime()
			if prof != nil {
				pprof.StopCPUProfile()
				prof.Close()
			}
			close(stop)
			<-watched // it saw every update counted, so every arrival noted
			var raw []byte
			for _, as := range arrivals {
				for _, a := range as {
					raw = binary.LittleEndian.AppendUint64(raw, uint64(a))
				}
			}
			if err := os.WriteFile(arrivalsTo, raw, 0o644); err != nil {
				return err
			}
			say("DONE %d", cpu1-cpu0)
		}
	}
	return nil
}

// fanoutClient reads client ci's frames until its connection closes:
// the subscription's reply, the snapshot (counted in received) and the
// updates, each counted in received with its arrival (unix ns) appended to
// arrivals. A parsing client checks each update is the one published; the
// first mismatch, or the server closing the connection, goes to bad (once
// the shard stops, nobody reads bad any more).
func fanoutClient(c *websocket.Conn, ci int, parse bool, arrivals *[]int64, received *atomic.Int64, bad *atomic.Pointer[string]) {
	fail := func(format string, args ...any) {
		s := fmt.Sprintf("client %d: "+format, append([]any{ci}, args...)...)
		bad.CompareAndSwap(nil, &s)
	}
	buf := make([]byte, 0, 1024)
	for frame := 0; ; frame++ {
		_, r, err := c.Reader(context.Background()) // no deadline: ends with the connection
		if err != nil {
			fail("connection ended after %d frames: %v", frame, err)
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = slices.Grow(buf, len(buf))
			}
			k, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+k]
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		at := time.Now()
		if frame == 0 {
			continue // the subscription's reply
		}
		i := frame - 1 // 0: the snapshot
		if parse {
			var m msg
			// The server publishes update i in window i+1 (the snapshot's is 0).
			if err := json.Unmarshal(buf, &m); err != nil || m.Symbol != "BTC/USDT" || (i > 0 && m.OpenTime != int64(i+1)*60_000) {
				fail("frame %d is not update %d of BTC/USDT: %v %s", frame, i, err, buf)
				return
			}
		}
		if i > 0 {
			*arrivals = append(*arrivals, at.UnixNano())
		}
		received.Add(1)
	}
}
