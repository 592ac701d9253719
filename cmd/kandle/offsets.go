package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kandle/kandle/engine"
)

func cmdOffsets(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "offsets", "-t topology.yaml [-brokers ...] [--reset NAME --to TIME [--execute]]",
		"Shows, for every processor stage and sink, each input partition's committed offset, end offset, lag\n"+
			"and event-time watermark (from the stage's changelog), and which partition holds the stage back — for a\n"+
			"rollup, the upstream output partition it waits for. A stage reading Kinesis lists its lease table: each\n"+
			"shard's parents, owner and last checkpoint.\n\n"+
			"With --reset NAME --to TIME it plans moving sink NAME's consumer group to the first record at or after\n"+
			"TIME (a dry run unless --execute; stop every instance first). Sinks upsert idempotently, so re-delivery\n"+
			"is safe. Processor stages are not reset this way: their state would no longer match their offsets —\n"+
			"rebuild their history with `kandle replay --from TIME` instead.")
	top := topologyFlag(fs)
	brokers := brokersFlag(fs)
	reset := fs.String("reset", "", "sink whose consumer group to move (see --to)")
	to := fs.String("to", "", "RFC 3339 time to move --reset's group to")
	execute := fs.Bool("execute", false, "apply the --reset plan (default: print it only)")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	seeds, err := standaloneBrokers(t, *brokers)
	if err != nil {
		return err
	}
	if *reset != "" {
		if _, ok := t.Processors[*reset]; ok {
			return fmt.Errorf("%s is a processor stage: resetting its offsets would leave its state out of step; use `kandle replay -t FILE --from TIME` to rebuild its candles", *reset)
		}
		at, err := time.Parse(time.RFC3339Nano, *to)
		if err != nil {
			return fmt.Errorf("--to: want an RFC 3339 time such as 2026-11-23T10:00:00Z: %w", err)
		}
		group, plan, err := engine.PlanReset(ctx, t, seeds, *reset, at)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "GROUP %s\tTOPIC\tPARTITION\tFROM\tTO\n", group)
		for _, r := range plan {
			fmt.Fprintf(w, "\t%s\t%d\t%d\t%d\n", r.Topic, r.Partition, r.From, r.To)
		}
		w.Flush()
		if !*execute {
			fmt.Fprintln(e.stdout, "dry run: nothing changed (add --execute to apply)")
			return nil
		}
		if err := engine.ApplyReset(ctx, t, seeds, group, plan); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "offsets reset")
		return nil
	}
	all, err := engine.Offsets(ctx, t, seeds)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tNAME\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tWATERMARK (UTC)\t")
	for _, g := range all {
		for _, topic := range slices.Sorted(maps.Keys(g.Topics)) {
			for _, p := range g.Topics[topic] {
				wm, committed, mark := "-", "-", ""
				if p.HasWatermark {
					wm = time.UnixMilli(p.Watermark).UTC().Format("2006-01-02 15:04:05")
				}
				if p.Committed >= 0 {
					committed = fmt.Sprint(p.Committed)
				}
				if g.HoldingBack == fmt.Sprintf("%s[%d]", topic, p.Partition) && (p.Lag > 0 || p.HasWatermark) {
					mark = "← holding back"
				}
				kind := g.Kind
				if g.FusedInto != "" {
					kind += " (fused into " + g.FusedInto + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", kind, g.Name, topic, p.Partition, committed, p.End, p.Lag, wm, mark)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, g := range all {
		if g.FusedInto != "" {
			fmt.Fprintf(e.stdout, "\nprocessor %s runs fused into the stage of %s: it takes its input from memory in that stage's transactions, so its consumer group %s is not joined; COMMITTED is the position its changelog holds.\n", g.Name, g.FusedInto, g.Group)
		}
	}
	for _, g := range all {
		if g.Shards == nil {
			continue
		}
		fmt.Fprintf(e.stdout, "\n%s %s reads Kinesis; lease table %s (checkpoints are hints, the changelog is authoritative):\n", g.Kind, g.Name, g.Group)
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "SHARD\tPARENTS\tOWNER\tCHECKPOINT\t")
		for _, l := range g.Shards {
			owner := l.Owner
			if owner == "" {
				owner = "-"
			}
			parents := strings.Join(l.Parents, ",")
			if parents == "" {
				parents = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", l.Shard, parents, owner, l.Checkpoint)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}
