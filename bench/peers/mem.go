package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// setCleaner sets the broker's log.cleaner.backoff.ms: how often the
// in-process broker compacts the topics whose cleanup.policy is compact
// (the first such topic starts its cleaner, so this is set before any is
// created). Without it a Goka run over 10 M trades keeps every changelog
// record of its group table, one per trade, in the broker's memory.
func setCleaner(ctx context.Context, seeds []string, every time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ms := strconv.FormatInt(every.Milliseconds(), 10)
	resp, err := kadm.NewClient(cl).AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "log.cleaner.backoff.ms", Value: &ms}})
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		return fmt.Errorf("set the broker's log.cleaner.backoff.ms: %w", err)
	}
	return nil
}

// watchRSS checks the process's resident memory every second and cancels
// ctx with an error when it passes limit bytes. It returns the function
// that stops it and waits for it.
func watchRSS(ctx context.Context, limit int64, cancel context.CancelCauseFunc) func() {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if cur, _ := procStatus("VmRSS"); cur > limit {
				cancel(fmt.Errorf("resident memory %d MiB passed -maxrss %d MiB", cur>>20, limit>>20))
				return
			}
		}
	}()
	return func() { stop(); <-done }
}

// rss says the process's resident memory now and at its peak.
func rss() string {
	cur, err := procStatus("VmRSS")
	if err != nil {
		return "unknown"
	}
	peak, _ := procStatus("VmHWM")
	return fmt.Sprintf("%d MiB (peak %d MiB)", cur>>20, peak>>20)
}

// procStatus reads one of the kB fields of /proc/self/status, in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}
