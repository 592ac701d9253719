package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kandle/kandle/engine"
)

// HTTP server limits: a slow or stuck client cannot hold connections (and
// goroutines) open, and the probes answer quickly or not at all.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 60 * time.Second
)

// probe answers /healthz and /readyz: before the engine runs it is alive
// but not ready (with the reason, e.g. a sink store that is still down);
// then it asks the engine.
type probe struct {
	mu  sync.Mutex
	why string // not ready before the engine exists
	eng *engine.Engine
}

func newProbe() *probe { return &probe{why: "starting"} }

// waiting records why the engine is not running yet.
func (p *probe) waiting(why string) {
	p.mu.Lock()
	p.why = why
	p.mu.Unlock()
}

// running hands the probes to eng.
func (p *probe) running(eng *engine.Engine) {
	p.mu.Lock()
	p.eng = eng
	p.mu.Unlock()
}

func (p *probe) status() engine.Status {
	p.mu.Lock()
	eng, why := p.eng, p.why
	p.mu.Unlock()
	if eng == nil {
		return engine.Status{Alive: true, Reasons: []string{why}}
	}
	return eng.Status()
}

// healthz: 200 while the process and every stage loop turn, else 503.
func (p *probe) healthz(w http.ResponseWriter, _ *http.Request) {
	st := p.status()
	if !st.Alive {
		http.Error(w, "not alive: "+strings.Join(st.Reasons, "; "), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz: 200 once partitions are assigned and restored, sinks reachable
// and lag below the threshold; else 503 with the reasons.
func (p *probe) readyz(w http.ResponseWriter, _ *http.Request) {
	st := p.status()
	if !st.Ready {
		http.Error(w, "not ready: "+strings.Join(st.Reasons, "; "), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}
