package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// Step statuses.
const (
	StatusPlanned     = "planned"     // dry run: would be done
	StatusDone        = "done"        // performed
	StatusUnsupported = "unsupported" // the endpoint does not implement it (e.g. dynalite and TTL)
)

// Step is one change Apply makes (or, in a dry run, would make).
type Step struct {
	Table  string
	Action string // "create table", "add GSI", "enable TTL"
	Detail string
	Status string
}

// Plan is what Apply did or would do, table by table.
type Plan struct {
	DryRun   bool
	Steps    []Step
	UpToDate []string // tables that needed nothing
	Warnings []string // drift Apply cannot fix, unsupported operations
}

// Changed reports whether Apply performed a mutation.
func (p Plan) Changed() bool {
	for _, s := range p.Steps {
		if s.Status == StatusDone {
			return true
		}
	}
	return false
}

// String renders the plan for humans (the --dry-run output).
func (p Plan) String() string {
	var b strings.Builder
	if p.DryRun {
		b.WriteString("dry run: nothing was changed\n")
	}
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "%-13s table %s: %s", "["+s.Status+"]", s.Table, s.Action)
		if s.Detail != "" {
			fmt.Fprintf(&b, " (%s)", s.Detail)
		}
		b.WriteByte('\n')
	}
	for _, t := range p.UpToDate {
		fmt.Fprintf(&b, "%-13s table %s: up to date\n", "[ok]", t)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if len(p.Steps) == 0 && len(p.UpToDate) == 0 && len(p.Warnings) == 0 {
		b.WriteString("no tables declared\n")
	}
	return b.String()
}

// Apply makes the tables in specs exist as declared: it creates missing
// tables (with their GSIs and LSIs), adds missing GSIs to existing tables
// and enables TTL. Running it again changes nothing. With dryRun it only
// reads, and the Plan says what it would do. Drift it cannot fix (a
// different key schema, a missing LSI) is reported as a warning. Endpoints
// without UpdateTimeToLive (dynalite) are tolerated with a warning.
func Apply(ctx context.Context, client API, specs []TableSpec, dryRun bool, opts ...Option) (Plan, error) {
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	plan := Plan{DryRun: dryRun}
	for i := range specs {
		spec := specs[i].withDefaults()
		if errs := spec.validate("table"); len(errs) > 0 {
			return plan, fmt.Errorf("table %q: %s", spec.Name, strings.Join(errs, "; "))
		}
		before := len(plan.Steps)
		if err := applyTable(ctx, client, spec, dryRun, o.log, &plan); err != nil {
			return plan, fmt.Errorf("provision table %s: %w", spec.Name, err)
		}
		if len(plan.Steps) == before {
			plan.UpToDate = append(plan.UpToDate, spec.Name)
		}
	}
	return plan, nil
}

func applyTable(ctx context.Context, client API, spec TableSpec, dryRun bool, log *slog.Logger, plan *Plan) error {
	desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(spec.Name)})
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		step := Step{Table: spec.Name, Action: "create table", Detail: describeSpec(spec), Status: StatusPlanned}
		if !dryRun {
			_, err := client.CreateTable(ctx, createInput(spec))
			var inUse *types.ResourceInUseException
			if errors.As(err, &inUse) {
				// Another instance is creating it right now: wait, then
				// reconcile the table it made.
				if err := waitActive(ctx, client, spec.Name, ""); err != nil {
					return err
				}
				return applyTable(ctx, client, spec, dryRun, log, plan)
			}
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			step.Status = StatusDone
			if err := waitActive(ctx, client, spec.Name, ""); err != nil {
				return err
			}
		}
		plan.Steps = append(plan.Steps, step)
		return applyTTL(ctx, client, spec, dryRun, true, log, plan)
	case err != nil:
		return fmt.Errorf("describe: %w", err)
	}
	t := desc.Table
	checkKeys(spec, t, plan)
	have := map[string]bool{}
	for _, g := range t.GlobalSecondaryIndexes {
		have[aws.ToString(g.IndexName)] = true
	}
	for _, l := range t.LocalSecondaryIndexes {
		have[aws.ToString(l.IndexName)] = true
	}
	for _, name := range slices.Sorted(maps.Keys(spec.LSIs)) {
		if !have[name] {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("table %s: LSI %s is missing and can only be created with the table; recreate the table (or drop the LSI from the YAML)", spec.Name, name))
		}
	}
	typ := attrTypes(spec)
	for _, name := range slices.Sorted(maps.Keys(spec.GSIs)) {
		if have[name] {
			continue
		}
		ix := spec.GSIs[name]
		step := Step{Table: spec.Name, Action: "add GSI", Detail: name + " " + describeIndex(ix, ""), Status: StatusPlanned}
		if !dryRun {
			in := &dynamodb.UpdateTableInput{
				TableName:            aws.String(spec.Name),
				AttributeDefinitions: attrDefs(typ, ix.PK, ix.SK),
				GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
					IndexName:             aws.String(name),
					KeySchema:             keySchema(ix.PK, ix.SK),
					Projection:            projection(ix),
					ProvisionedThroughput: throughput(spec),
				}}},
			}
			_, err := client.UpdateTable(ctx, in)
			if err == nil {
				err = waitActive(ctx, client, spec.Name, name)
			}
			switch {
			case errors.Is(err, errIndexIgnored) || gsiCreateUnsupported(err):
				step.Status = StatusUnsupported
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("table %s: this endpoint cannot add GSI %s to an existing table (dynalite cannot); delete and re-provision the table to get it", spec.Name, name))
				log.Warn("dynamodb GSI not added: the endpoint does not support creating indexes on existing tables (expected with dynalite)", "table", spec.Name, "index", name)
			case err != nil:
				return fmt.Errorf("add GSI %s: %w", name, err)
			default:
				step.Status = StatusDone
			}
		}
		plan.Steps = append(plan.Steps, step)
	}
	return applyTTL(ctx, client, spec, dryRun, false, log, plan)
}

// applyTTL enables TTL on spec.TTLAttribute unless it already is.
func applyTTL(ctx context.Context, client API, spec TableSpec, dryRun, created bool, log *slog.Logger, plan *Plan) error {
	if spec.TTLAttribute == "" {
		return nil
	}
	if !(created && dryRun) { // a table that does not exist yet has no TTL to describe
		out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(spec.Name)})
		if err != nil && !unknownOperation(err) {
			return fmt.Errorf("describe TTL: %w", err)
		}
		if err == nil && out.TimeToLiveDescription != nil {
			d := out.TimeToLiveDescription
			on := d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling
			if on && aws.ToString(d.AttributeName) == spec.TTLAttribute {
				return nil
			}
			if on {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("table %s: TTL is enabled on %q, not %q; DynamoDB allows one TTL attribute, so disable it first or set ttl_attribute: %s",
					spec.Name, aws.ToString(d.AttributeName), spec.TTLAttribute, aws.ToString(d.AttributeName)))
				return nil
			}
		}
	}
	step := Step{Table: spec.Name, Action: "enable TTL", Detail: "attribute " + spec.TTLAttribute, Status: StatusPlanned}
	if !dryRun {
		_, err := client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(spec.Name),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(spec.TTLAttribute), Enabled: aws.Bool(true)},
		})
		switch {
		case unknownOperation(err):
			step.Status = StatusUnsupported
			msg := fmt.Sprintf("table %s: this endpoint does not implement UpdateTimeToLive (dynalite does not); items carry %s but will not expire here. On AWS, TTL is enabled by this same step", spec.Name, spec.TTLAttribute)
			plan.Warnings = append(plan.Warnings, msg)
			log.Warn("dynamodb TTL not enabled: the endpoint does not support UpdateTimeToLive (expected with dynalite)", "table", spec.Name, "attribute", spec.TTLAttribute)
		case err != nil:
			return fmt.Errorf("enable TTL: %w", err)
		default:
			step.Status = StatusDone
		}
	}
	plan.Steps = append(plan.Steps, step)
	return nil
}

// errIndexIgnored: UpdateTable succeeded but the table does not list the
// new index (dynalite accepts GSI creates and ignores them).
var errIndexIgnored = errors.New("the endpoint accepted the new GSI but does not list it")

// gsiCreateUnsupported recognizes dynalite's refusal of a GSI create
// without ProvisionedThroughput (which AWS requires to be absent for
// on-demand tables).
func gsiCreateUnsupported(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException" &&
		strings.Contains(api.ErrorMessage(), "create.provisionedThroughput")
}

func unknownOperation(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException"
}

// checkKeys warns when an existing table's key schema differs from spec.
func checkKeys(spec TableSpec, t *types.TableDescription, plan *Plan) {
	want := map[types.KeyType]string{types.KeyTypeHash: spec.PKAttribute, types.KeyTypeRange: spec.SKAttribute}
	got := map[types.KeyType]string{}
	for _, k := range t.KeySchema {
		got[k.KeyType] = aws.ToString(k.AttributeName)
	}
	typ := map[string]string{}
	for _, a := range t.AttributeDefinitions {
		typ[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	if got[types.KeyTypeHash] != want[types.KeyTypeHash] || got[types.KeyTypeRange] != want[types.KeyTypeRange] ||
		typ[spec.SKAttribute] != spec.SKType {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("table %s: existing key schema (pk %s, sk %s %s) differs from the YAML (pk %s, sk %s %s); key schemas cannot change, so fix the YAML or recreate the table",
			spec.Name, got[types.KeyTypeHash], got[types.KeyTypeRange], typ[got[types.KeyTypeRange]], spec.PKAttribute, spec.SKAttribute, spec.SKType))
	}
}

// waitActive polls until the table (and index, if named) is ACTIVE.
func waitActive(ctx context.Context, client API, table, index string) error {
	d := 20 * time.Millisecond
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("wait for %s to become active: %w", table, err)
		}
		ready := out.Table.TableStatus == types.TableStatusActive
		if index != "" {
			found := false
			for _, g := range out.Table.GlobalSecondaryIndexes {
				if aws.ToString(g.IndexName) == index {
					found = true
					ready = ready && g.IndexStatus == types.IndexStatusActive
				}
			}
			if !found { // AWS lists a new index as CREATING at once
				return errIndexIgnored
			}
		}
		if ready {
			return nil
		}
		if err := sinkkit.Sleep(ctx, d); err != nil {
			return fmt.Errorf("wait for %s to become active: %w", table, err)
		}
		d = min(2*d, 2*time.Second)
	}
}

func createInput(spec TableSpec) *dynamodb.CreateTableInput {
	typ := attrTypes(spec)
	names := []string{spec.PKAttribute, spec.SKAttribute}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(spec.Name),
		KeySchema:   keySchema(spec.PKAttribute, spec.SKAttribute),
		BillingMode: billingMode(spec),
	}
	in.ProvisionedThroughput = throughput(spec)
	for _, name := range slices.Sorted(maps.Keys(spec.GSIs)) {
		ix := spec.GSIs[name]
		names = append(names, ix.PK, ix.SK)
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(name), KeySchema: keySchema(ix.PK, ix.SK),
			Projection: projection(ix), ProvisionedThroughput: throughput(spec),
		})
	}
	for _, name := range slices.Sorted(maps.Keys(spec.LSIs)) {
		ix := spec.LSIs[name]
		names = append(names, ix.SK)
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, types.LocalSecondaryIndex{
			IndexName: aws.String(name), KeySchema: keySchema(spec.PKAttribute, ix.SK), Projection: projection(ix),
		})
	}
	in.AttributeDefinitions = attrDefs(typ, names...)
	return in
}

// attrTypes returns the key attribute types of spec (validated before).
func attrTypes(spec TableSpec) map[string]string {
	t, _ := spec.attributeTypes()
	return t
}

// attrDefs returns the definitions of the named attributes, each once.
func attrDefs(typ map[string]string, names ...string) []types.AttributeDefinition {
	seen := map[string]bool{}
	var out []types.AttributeDefinition
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeType(typ[n])})
	}
	return out
}

func keySchema(pk, sk string) []types.KeySchemaElement {
	ks := []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}}
	if sk != "" {
		ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange})
	}
	return ks
}

func projection(ix IndexSpec) *types.Projection {
	p := &types.Projection{ProjectionType: types.ProjectionType(ix.projection())}
	if ix.projection() == "INCLUDE" {
		p.NonKeyAttributes = ix.Include
	}
	return p
}

func billingMode(spec TableSpec) types.BillingMode {
	if spec.BillingMode == "PROVISIONED" {
		return types.BillingModeProvisioned
	}
	return types.BillingModePayPerRequest
}

func throughput(spec TableSpec) *types.ProvisionedThroughput {
	if spec.BillingMode != "PROVISIONED" {
		return nil
	}
	return &types.ProvisionedThroughput{
		ReadCapacityUnits:  aws.Int64(int64(spec.ReadCapacity)),
		WriteCapacityUnits: aws.Int64(int64(spec.WriteCapacity)),
	}
}

func describeSpec(spec TableSpec) string {
	var parts []string
	parts = append(parts, fmt.Sprintf("pk %s S, sk %s %s, %s", spec.PKAttribute, spec.SKAttribute, spec.SKType, spec.BillingMode))
	for _, name := range slices.Sorted(maps.Keys(spec.GSIs)) {
		parts = append(parts, "GSI "+name+" "+describeIndex(spec.GSIs[name], ""))
	}
	for _, name := range slices.Sorted(maps.Keys(spec.LSIs)) {
		parts = append(parts, "LSI "+name+" "+describeIndex(spec.LSIs[name], spec.PKAttribute))
	}
	return strings.Join(parts, "; ")
}

func describeIndex(ix IndexSpec, pk string) string {
	if pk == "" {
		pk = ix.PK
	}
	s := "pk " + pk
	if ix.SK != "" {
		s += ", sk " + ix.SK
	}
	s += ", projection " + ix.projection()
	if len(ix.Include) > 0 {
		s += " " + strings.Join(ix.Include, ",")
	}
	return s
}
