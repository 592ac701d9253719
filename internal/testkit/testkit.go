// Package testkit starts the real servers kandle's integration tests talk to
// (redis-server for Valkey, dynalite for DynamoDB, s3rver for S3,
// kinesis-mock for Kinesis) on free loopback ports, and stops them by pid
// when the test ends.
//
// A missing server fails the test with the command that installs it; tests
// never skip silently. scripts/test-deps.sh (run by `make test` and
// .ci/run) installs everything.
package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct TCP ports that were free a moment ago on
// every interface (for servers such as kinesis-mock that bind all of them):
// the listeners are held until all n are chosen, so no two are the same.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatalf("testkit: no free port: %v", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// RepoRoot returns the repository root (the folder holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// EmuDir returns the folder with the npm emulators (tools/emu/node_modules),
// or KANDLE_EMU_DIR when set.
func EmuDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KANDLE_EMU_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "tools", "emu")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("testkit: npm emulators not installed in %s: run `bash scripts/test-deps.sh` (or `make deps`)", dir)
	}
	return dir
}

// Service is a server process started for one test.
type Service struct {
	Name string
	Addr string // host:port
	cmd  *exec.Cmd
	log  *os.File
}

// URL returns "http://" + Addr.
func (s *Service) URL() string { return "http://" + s.Addr }

// startTimeout bounds how long Start waits for a server to be ready.
const startTimeout = 120 * time.Second

// Start runs bin with args (and extra env) in its own process group, waits
// until ready returns nil (up to startTimeout: kinesis-mock, 9 MB of
// JavaScript, takes half a minute to start on a loaded machine), and stops
// the process group by pid at test cleanup, or the process when the test
// binary dies without cleanups (see ChildAttr). Output goes to a log file
// that is printed if the test fails.
func Start(t testing.TB, name, addr string, ready func() error, bin string, args []string, env ...string) *Service {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("testkit: %s needs %q, which is not installed: run `bash scripts/test-deps.sh`", name, bin)
	}
	logf, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = ChildAttr(true)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start %s: %v", name, err)
	}
	s := &Service{Name: name, Addr: addr, cmd: cmd, log: logf}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, tail(string(b), 4000))
		}
		logf.Close()
	})
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("testkit: %s exited before it was ready (%v):\n%s", name, err, tail(string(b), 4000))
		default:
		}
		if err := ready(); err == nil {
			return s
		} else if time.Now().After(deadline) {
			t.Fatalf("testkit: %s not ready at %s after %v: %v", name, addr, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the service now (for outage tests); cleanup is still safe.
func (s *Service) Stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func tcpReady(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
}

func httpReady(url string, accept func(code int) bool) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if !accept(resp.StatusCode) {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

// Redis starts Debian's redis-server (speaks the Valkey protocol) and returns it.
// Extra args (e.g. "--requirepass", "pw") are appended.
func Redis(t testing.TB, extra ...string) *Service {
	t.Helper()
	port := FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir()}, extra...)
	return Start(t, "redis-server", addr, tcpReady(addr), "redis-server", args)
}

// Dynalite starts the dynalite DynamoDB emulator; use Service.URL() as the endpoint.
func Dynalite(t testing.TB) *Service {
	t.Helper()
	port := FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin := filepath.Join(EmuDir(t), "node_modules", ".bin", "dynalite")
	preload := filepath.Join(t.TempDir(), "dynalite-keepalive.js")
	if err := os.WriteFile(preload, []byte(dynaliteKeepAlive), 0o644); err != nil {
		t.Fatal(err)
	}
	return Start(t, "dynalite", addr, httpReady("http://"+addr, func(c int) bool { return c < 500 }),
		"node", []string{"--require", preload, bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
			"--createTableMs", "20", "--deleteTableMs", "20", "--updateTableMs", "20"})
}

// dynaliteKeepAlive is loaded before dynalite. Dynalite throws from a
// request's error handler, so a client that dies in the middle of sending a
// request (a test SIGKILLs an instance) takes the whole emulator down with
// "Error: aborted" (ECONNRESET), and every other client of the test with it.
// A real DynamoDB only drops that request: so does this, and any other
// uncaught error still ends the process.
const dynaliteKeepAlive = `process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('dynalite: a client went away mid-request; request dropped');
    return;
  }
  console.error(err);
  process.exit(1);
});
`

// S3rver starts the s3rver S3 emulator (credentials S3RVER/S3RVER only; its
// suffix Range requests are wrong).
func S3rver(t testing.TB) *Service {
	t.Helper()
	port := FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin := filepath.Join(EmuDir(t), "node_modules", ".bin", "s3rver")
	return Start(t, "s3rver", addr, httpReady("http://"+addr, func(c int) bool { return c == 200 }),
		"node", []string{bin, "--address", "127.0.0.1", "--port", fmt.Sprint(port), "--directory", t.TempDir(), "--silent"})
}

// KinesisMock starts kinesis-local (kinesis-mock) with plain HTTP on a free
// port. streams is its INITIALIZE_STREAMS value ("name:shards,..."), or "".
func KinesisMock(t testing.TB, streams string) *Service {
	t.Helper()
	ports := FreePorts(t, 2)
	port, tlsPort := ports[0], ports[1]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dir := filepath.Join(EmuDir(t), "node_modules", "kinesis-local")
	env := []string{
		fmt.Sprintf("KINESIS_MOCK_PLAIN_PORT=%d", port),
		fmt.Sprintf("KINESIS_MOCK_TLS_PORT=%d", tlsPort),
		"KINESIS_MOCK_CERT_PATH=" + filepath.Join(dir, "server.json"),
		"LOG_LEVEL=WARN",
		"SHARD_LIMIT=100",
	}
	if streams != "" {
		env = append(env, "INITIALIZE_STREAMS="+streams)
	}
	return Start(t, "kinesis-mock", addr, httpReady("http://"+addr+"/healthcheck", func(c int) bool { return c == 200 }),
		"node", []string{filepath.Join(dir, "main.js")}, env...)
}

// DuckDB runs sql with DuckDB (npm @duckdb/node-api, offline) and returns
// the rows as JSON objects, one per line. In sql, the view t reads file.
func DuckDB(t testing.TB, file, sql string) []string {
	t.Helper()
	dir := EmuDir(t)
	script := filepath.Join(dir, "pq.mjs")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("testkit: %s missing: run `bash scripts/test-deps.sh`", script)
	}
	out, err := exec.Command("node", script, file, sql).CombinedOutput()
	if err != nil {
		t.Fatalf("duckdb %q: %v\n%s", sql, err, out)
	}
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			rows = append(rows, l)
		}
	}
	return rows
}
