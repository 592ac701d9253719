package main

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/kandle/kandle/connectors/dynamodb"
)

// cmdTables provisions the DynamoDB tables a topology's sinks declare. Sinks
// with provision: true do this themselves before their first write; this
// command is for deployments where the job's credentials may not create
// tables, and for seeing the plan before anything changes.
func cmdTables(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "apply" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			args = []string{"apply", "-h"}
		} else {
			fmt.Fprintln(e.stderr, "Usage: kandle tables apply -t topology.yaml [--dry-run] [-sink NAME,...]")
			return fmt.Errorf("name the action: `kandle tables apply` (see `kandle tables apply -h`)")
		}
	}
	fs := newFlags(e, "tables apply", "-t topology.yaml [--dry-run] [-sink NAME,...]",
		"Creates every table the topology's dynamodb sinks declare, with its GSIs, LSIs and TTL, and adds\n"+
			"GSIs or TTL missing from existing tables. Running it again changes nothing. Drift it cannot fix\n"+
			"(another key schema, a missing LSI) is printed as a warning. Credentials come from the default AWS\n"+
			"chain (AWS_ACCESS_KEY_ID, profile, instance role); each sink's region and endpoint apply.")
	top := topologyFlag(fs)
	dry := fs.Bool("dry-run", false, "only read: print what would be created or changed, change nothing")
	only := fs.String("sink", "", "comma-separated dynamodb sink names to provision (default: all of them)")
	if err := e.parseNoArgs(fs, args[1:]); err != nil {
		return err
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	want := map[string]bool{}
	for _, n := range splitList(*only) {
		sk, ok := t.Sinks[n]
		if !ok {
			return fmt.Errorf("topology %s has no sink %q", t.Name, n)
		}
		if _, ok := sk.Config.(*dynamodb.Config); !ok {
			return fmt.Errorf("sink %q is a %s sink; tables apply provisions dynamodb sinks", n, sk.Kind)
		}
		want[n] = true
	}
	// Sinks may share a table (candles from several processors, one table);
	// their declarations are merged so every index and TTL any of them
	// names is provisioned, whichever sink comes first.
	type target struct {
		cfg   *dynamodb.Config
		spec  dynamodb.TableSpec
		sinks []string
	}
	var targets []*target
	byID := map[string]*target{}
	for _, name := range slices.Sorted(maps.Keys(t.Sinks)) {
		cfg, ok := t.Sinks[name].Config.(*dynamodb.Config)
		if !ok || len(want) > 0 && !want[name] {
			continue
		}
		id := cfg.Region + "|" + cfg.Endpoint + "|" + cfg.Table.Name
		tg, ok := byID[id]
		if !ok {
			tg = &target{cfg: cfg, spec: cfg.Table}
			byID[id] = tg
			targets = append(targets, tg)
		} else if err := mergeTable(&tg.spec, cfg.Table); err != nil {
			return fmt.Errorf("sinks %s and %s declare table %s differently: %w; make the declarations agree",
				tg.sinks[0], name, cfg.Table.Name, err)
		}
		tg.sinks = append(tg.sinks, name)
	}
	for _, tg := range targets {
		client, err := dynamodb.NewClient(ctx, *tg.cfg, dynamodb.WithLogger(e.log))
		if err != nil {
			return fmt.Errorf("sink %s: %w", tg.sinks[0], err)
		}
		plan, err := dynamodb.Apply(ctx, client, []dynamodb.TableSpec{tg.spec}, *dry, dynamodb.WithLogger(e.log))
		if err != nil {
			return fmt.Errorf("sink %s: provision table %s at %s: %w (check the endpoint and credentials)",
				tg.sinks[0], tg.spec.Name, endpointName(tg.cfg.Endpoint), err)
		}
		fmt.Fprintf(e.stdout, "sink %s (%s, %s):\n%s", strings.Join(tg.sinks, ", "), endpointName(tg.cfg.Endpoint), tg.cfg.Region, plan)
	}
	if len(targets) == 0 {
		fmt.Fprintf(e.stdout, "topology %s declares no dynamodb sinks: nothing to provision\n", t.Name)
	}
	return nil
}

// mergeTable adds b's indexes and TTL to a, and fails when the two
// disagree on something only one of them can have.
func mergeTable(a *dynamodb.TableSpec, b dynamodb.TableSpec) error {
	if a.PKAttribute != b.PKAttribute || a.SKAttribute != b.SKAttribute || a.SKType != b.SKType {
		return fmt.Errorf("key schema %s/%s(%s) vs %s/%s(%s)", a.PKAttribute, a.SKAttribute, a.SKType,
			b.PKAttribute, b.SKAttribute, b.SKType)
	}
	switch {
	case a.TTLAttribute == "":
		a.TTLAttribute = b.TTLAttribute
	case b.TTLAttribute != "" && b.TTLAttribute != a.TTLAttribute:
		return fmt.Errorf("ttl_attribute %s vs %s", a.TTLAttribute, b.TTLAttribute)
	}
	var err error
	if a.GSIs, err = mergeIndexes("GSI", a.GSIs, b.GSIs); err != nil {
		return err
	}
	a.LSIs, err = mergeIndexes("LSI", a.LSIs, b.LSIs)
	return err
}

func mergeIndexes(kind string, a, b map[string]dynamodb.IndexSpec) (map[string]dynamodb.IndexSpec, error) {
	out := make(map[string]dynamodb.IndexSpec, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if old, ok := out[k]; ok && !reflect.DeepEqual(old, v) {
			return nil, fmt.Errorf("%s %s is declared with different keys or projections", kind, k)
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func endpointName(ep string) string {
	if ep == "" {
		return "AWS"
	}
	return ep
}
