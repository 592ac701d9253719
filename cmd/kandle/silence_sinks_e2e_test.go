package main

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddbsdk "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/internal/testkit"
)

// silenceSinksTopology sends the silence events of the devices to the
// seed's DynamoDB item per device and event and to Valkey.
const silenceSinksTopology = `
name: silent
group: silent
brokers: [%[1]s]
metrics: ""
commit_interval: 50ms
sources:
  readings: {topic: readings, partitions: 3, fields: {key: device, time: ts, price: value, qty: "", id: ""}}
processors:
  watch:
    kind: silence
    from: readings
    carry: [owner]
    output: {topic: silence.events, partitions: 3}
    levels:
      - {name: unreachable, after: 2s, action: status}
      - {name: alert1, after: 4s, action: alert}
dead_letter: {topic: silent.dlq}
sinks:
  alerts:
    kind: dynamodb
    from: [watch]
    endpoint: %[2]s
    provision: true
    table: {name: device_events, sk_type: S}
    pk: "DEVICE#{owner}"
    sk: "{device}#{event}"
  status:
    kind: valkey
    from: [watch]
    addrs: [%[3]s]
`

// TestSilenceEndToEndSinks: devices report through the dev broker, `kandle
// run` (a child process) fires their levels on the wall clock and a
// recovery, and the DynamoDB (dynalite) and Valkey (redis-server) sinks end
// with one item per device and event and each device's latest status.
func TestSilenceEndToEndSinks(t *testing.T) {
	testkit.WallClockTest(t) // the child kandle run's credentials: see TestMain
	ddb := testkit.Dynalite(t)
	rds := testkit.Redis(t)
	c := newSilenceCluster(t, silenceSinksTopology, ddb.URL(), rds.Addr)
	c.startInstance("a", true)
	sendReadings(t, c, 0, 1, 2, 3) // owners o0 o1 o2 o0
	time.Sleep(3 * time.Second)    // wall-clock schedule: d03 reports again after unreachable fired
	sendReadings(t, c, 3)

	client := ddbsdk.NewFromConfig(aws.Config{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")},
		func(o *ddbsdk.Options) { o.BaseEndpoint = aws.String(ddb.URL()) })
	items := func(owner string) map[string]map[string]types.AttributeValue {
		out, err := client.Query(context.Background(), &ddbsdk.QueryInput{TableName: aws.String("device_events"),
			KeyConditionExpression:    aws.String("pk = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: "DEVICE#" + owner}}})
		m := map[string]map[string]types.AttributeValue{}
		if err != nil {
			return m // the table may not exist yet
		}
		for _, it := range out.Items {
			m[it["sk"].(*types.AttributeValueMemberS).Value] = it
		}
		return m
	}
	want := map[string][]string{
		"o0": {"d00#unreachable", "d00#alert1", "d03#unreachable", "d03#recovered", "d03#alert1"},
		"o1": {"d01#unreachable", "d01#alert1"},
		"o2": {"d02#unreachable", "d02#alert1"},
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing := ""
		for owner, sks := range want {
			got := items(owner)
			for _, sk := range sks {
				if got[sk] == nil {
					missing = owner + " " + sk
				}
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DynamoDB item %s missing after 90s\n%s", missing, c.insts["a"].p.tail(3000))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if it := items("o0")["d03#recovered"]; it["highest"].(*types.AttributeValueMemberS).Value != "unreachable" {
		t.Fatalf("d03 recovered item %v, want highest unreachable", it)
	}
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{rds.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vk.Close()
	for dev, status := range map[string]string{"d00": "alert1", "d01": "alert1", "d03": "alert1"} {
		var h map[string]string
		for time.Now().Before(deadline) {
			if h, err = vk.Do(context.Background(), vk.B().Hgetall().Key("device:status:"+dev).Build()).AsStrMap(); err == nil && h["status"] == status {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if h["status"] != status {
			t.Fatalf("valkey device:status:%s = %v, want status %s", dev, h, status)
		}
	}
}
