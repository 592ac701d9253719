package dynamodb

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/internal/testkit"
)

func historySpec(name string) TableSpec {
	return TableSpec{
		Name: name, PKAttribute: "pk", SKAttribute: "sk", SKType: "N", TTLAttribute: "expires_at",
		LSIs: map[string]IndexSpec{"by_close": {SK: "close_time", SKType: "N", Projection: "KEYS_ONLY"}},
		GSIs: map[string]IndexSpec{"by_tf": {PK: "timeframe", PKType: "S", SK: "open_time", SKType: "N",
			Projection: "INCLUDE", Include: []string{"c", "v"}}},
	}.withDefaults()
}

// TestApplyDynalite: creates the table with its GSI and LSI, reports that
// dynalite cannot enable TTL (without failing), and a second run performs
// no mutation.
func TestApplyDynalite(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	f := newFaultAPI(rawClient(dyn.URL()))
	specs := []TableSpec{historySpec("candles")}

	dry, err := Apply(ctx, f, specs, true, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Calls("CreateTable")+f.Calls("UpdateTable")+f.Calls("UpdateTimeToLive") != 0 {
		t.Fatalf("dry run called a mutating API: %v", f.calls)
	}
	if s := dry.String(); !strings.Contains(s, "dry run") || !strings.Contains(s, "[planned]     table candles: create table") ||
		!strings.Contains(s, "GSI by_tf") || !strings.Contains(s, "LSI by_close") || !strings.Contains(s, "enable TTL") {
		t.Fatalf("dry-run plan:\n%s", s)
	}
	if _, err := f.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("candles")}); err == nil {
		t.Fatal("dry run created the table")
	}

	plan, err := Apply(ctx, f, specs, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Changed() || plan.Steps[0].Action != "create table" || plan.Steps[0].Status != StatusDone {
		t.Fatalf("first Apply:\n%s", plan)
	}
	last := plan.Steps[len(plan.Steps)-1]
	if last.Action != "enable TTL" || last.Status != StatusUnsupported || len(plan.Warnings) != 1 ||
		!strings.Contains(plan.Warnings[0], "UpdateTimeToLive") {
		t.Fatalf("TTL on dynalite should be reported unsupported:\n%s", plan)
	}
	desc, err := f.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("candles")})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Table.GlobalSecondaryIndexes) != 1 || len(desc.Table.LocalSecondaryIndexes) != 1 ||
		desc.Table.GlobalSecondaryIndexes[0].Projection.ProjectionType != types.ProjectionTypeInclude {
		t.Fatalf("indexes not created as declared: %+v", desc.Table)
	}
	if desc.Table.TableStatus != types.TableStatusActive {
		t.Fatalf("table status %s after Apply", desc.Table.TableStatus)
	}

	before := f.Mutations()
	plan2, err := Apply(ctx, f, specs, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Mutations() != before || plan2.Changed() || f.Calls("CreateTable") != 1 || f.Calls("UpdateTable") != 0 {
		t.Fatalf("second Apply mutated (mutations %d -> %d, calls %v):\n%s", before, f.Mutations(), f.calls, plan2)
	}
}

// TestApplyIdempotentWithTTL runs Apply against a client that implements
// TTL as AWS does: the first run creates the table and enables TTL; the
// second makes no mutating call at all.
func TestApplyIdempotentWithTTL(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	f := newFaultAPI(&ttlAPI{API: rawClient(dyn.URL())})
	full := historySpec("hist")

	plan, err := Apply(ctx, f, []TableSpec{full}, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 2 || plan.Steps[1].Action != "enable TTL" || plan.Steps[1].Status != StatusDone || len(plan.Warnings) != 0 {
		t.Fatalf("first plan:\n%s", plan)
	}
	calls := f.Calls("CreateTable") + f.Calls("UpdateTable") + f.Calls("UpdateTimeToLive")
	plan, err = Apply(ctx, f, []TableSpec{full}, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Calls("CreateTable") + f.Calls("UpdateTable") + f.Calls("UpdateTimeToLive"); got != calls {
		t.Fatalf("second Apply made %d mutating calls: %v", got-calls, f.calls)
	}
	if len(plan.Steps) != 0 || len(plan.UpToDate) != 1 || len(plan.Warnings) != 0 ||
		!strings.Contains(plan.String(), "[ok]          table hist: up to date") {
		t.Fatalf("second plan:\n%s", plan)
	}

	// Drift Apply cannot fix is a warning: a different sort key type.
	drift := full
	drift.SKType = "S"
	plan, err = Apply(ctx, f, []TableSpec{drift}, true)
	if err != nil || len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "key schema") {
		t.Fatalf("drift plan (%v):\n%s", err, plan)
	}
}

// TestApplyAddGSI: a GSI added to the YAML of an existing table is planned
// and created with UpdateTable. dynalite cannot create GSIs on existing
// tables; Apply must report that instead of failing or waiting forever.
func TestApplyAddGSI(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	f := newFaultAPI(rawClient(dyn.URL()))
	full := historySpec("grow")
	full.TTLAttribute = ""
	bare := full
	bare.GSIs = nil
	if _, err := Apply(ctx, f, []TableSpec{bare}, false, WithLogger(quietLogger())); err != nil {
		t.Fatal(err)
	}
	dry, err := Apply(ctx, f, []TableSpec{full}, true, WithLogger(quietLogger()))
	if err != nil || len(dry.Steps) != 1 || dry.Steps[0].Action != "add GSI" || dry.Steps[0].Status != StatusPlanned {
		t.Fatalf("dry run after adding a GSI (%v):\n%s", err, dry)
	}
	plan, err := Apply(ctx, f, []TableSpec{full}, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Calls("UpdateTable") != 1 || len(plan.Steps) != 1 || plan.Steps[0].Action != "add GSI" ||
		plan.Steps[0].Status != StatusUnsupported || len(plan.Warnings) != 1 {
		t.Fatalf("add GSI on dynalite (UpdateTable calls %d):\n%s", f.Calls("UpdateTable"), plan)
	}
}

func TestApplyRejectsInvalidSpec(t *testing.T) {
	_, err := Apply(context.Background(), nil, []TableSpec{{Name: "x"}}, true)
	if err == nil || !strings.Contains(err.Error(), "valid table name") {
		t.Fatalf("Apply with a bad spec = %v", err)
	}
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		t.Fatal("unexpected error type")
	}
}

// TestApplyAddGSIOnAWS: against an endpoint that creates GSIs as AWS does,
// Apply waits until the new index is ACTIVE, reports it done, and the next
// run is a no-op.
func TestApplyAddGSIOnAWS(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	g := &gsiAPI{API: rawClient(dyn.URL()), creating: 3}
	f := newFaultAPI(g)
	full := historySpec("aws")
	full.TTLAttribute = ""
	bare := full
	bare.GSIs = nil
	if _, err := Apply(ctx, f, []TableSpec{bare}, false, WithLogger(quietLogger())); err != nil {
		t.Fatal(err)
	}
	plan, err := Apply(ctx, f, []TableSpec{full}, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 1 || plan.Steps[0].Status != StatusDone || len(plan.Warnings) != 0 {
		t.Fatalf("add GSI:\n%s", plan)
	}
	if g.creating != 0 {
		t.Fatalf("Apply returned while the index was still CREATING")
	}
	calls := f.Calls("UpdateTable")
	plan, err = Apply(ctx, f, []TableSpec{full}, false, WithLogger(quietLogger()))
	if err != nil || plan.Changed() || f.Calls("UpdateTable") != calls || len(plan.UpToDate) != 1 {
		t.Fatalf("second Apply (%v, UpdateTable %d -> %d):\n%s", err, calls, f.Calls("UpdateTable"), plan)
	}
}

// staleAPI answers the first DescribeTable with "not found", as when
// another instance creates the table between our check and our create.
type staleAPI struct {
	API
	once sync.Once
}

func (s *staleAPI) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	stale := false
	s.once.Do(func() { stale = true })
	if stale {
		return nil, &types.ResourceNotFoundException{Message: aws.String("injected: not found")}
	}
	return s.API.DescribeTable(ctx, in, o...)
}

// TestApplyConcurrentCreate: losing a CreateTable race to another instance
// is not an error; Apply reconciles the table the other one made.
func TestApplyConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	dyn := testkit.Dynalite(t)
	spec := historySpec("race")
	spec.TTLAttribute = ""
	if _, err := Apply(ctx, rawClient(dyn.URL()), []TableSpec{spec}, false, WithLogger(quietLogger())); err != nil {
		t.Fatal(err)
	}
	f := newFaultAPI(&staleAPI{API: rawClient(dyn.URL())})
	plan, err := Apply(ctx, f, []TableSpec{spec}, false, WithLogger(quietLogger()))
	if err != nil {
		t.Fatalf("Apply after losing the create race: %v", err)
	}
	if f.Calls("CreateTable") != 1 || f.Mutations() != 0 || plan.Changed() || len(plan.UpToDate) != 1 {
		t.Fatalf("CreateTable calls %d, mutations %d:\n%s", f.Calls("CreateTable"), f.Mutations(), plan)
	}
}
