package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/kandle/kandle"

// The repository keeps its layering: no upward import between floors, no
// connector reaching a processor or the engine, no connector in processors
// or serve, no wall clock in processors.
func TestLayering(t *testing.T) {
	problems, err := Check(filepath.Join("..", ".."), module)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// Check finds each kind of break, naming the file and the rule: run on a
// small module that breaks every rule once.
func TestLayeringCatchesBreaks(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+module+"\n")
	write("candle/c.go", "package candle\n")
	write("engine/e.go", "package engine\nimport _ \""+module+"/connectors/kafka\"\n")
	write("processors/p.go", "package processors\nimport (\n\t\"time\"\n\t_ \""+module+"/candle\"\n)\nfunc f() int64 { return time.Now().UnixMilli() }\n")
	write("processors/clock.go", "package processors\nimport clk \"time\"\nfunc g() { clk.Sleep(0) }\ntype SystemClock struct{}\nfunc (SystemClock) Now() clk.Time { return clk.Now() }\n")
	write("processors/conn.go", "package processors\nimport _ \""+module+"/connectors/kafka\"\n")
	write("processors/ok_test.go", "package processors\nimport \"time\"\nfunc h() { time.Now() }\n") // tests may
	write("connectors/kafka/k.go", "package kafka\nimport _ \""+module+"/candle\"\n")
	write("connectors/dynamodb/d.go", "package dynamodb\nimport _ \""+module+"/engine\"\n")
	write("connectors/valkey/v.go", "package valkey\nimport _ \""+module+"/internal/helper\"\n")
	write("internal/helper/h.go", "package helper\nimport _ \""+module+"/processors\"\n")
	write("serve/s.go", "package serve\nimport _ \""+module+"/internal/sinks\"\n")
	write("internal/sinks/s.go", "package sinks\nimport _ \""+module+"/connectors/valkey\"\n")
	write("topology/t.go", "package topology\nimport _ \""+module+"/processors\"\n")
	write("nested/go.mod", "module other\n")
	write("nested/n.go", "package n\nimport _ \""+module+"/engine\"\n")

	problems, err := Check(root, module)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"connectors/dynamodb/d.go: connector connectors/dynamodb imports engine: a connector never imports a processor or the engine",
		"connectors/dynamodb/d.go: connectors/dynamodb (floor 5) imports engine (floor 6)",
		"connectors/valkey/v.go: connector connectors/valkey imports processors (through internal/helper): a connector never imports a processor or the engine",
		"internal/helper/h.go: package internal/helper has no floor",
		"serve/s.go: serve imports connectors/valkey (through internal/sinks): serve never imports a connector",
		"serve/s.go: serve (floor 7) imports internal/sinks (floor 7)",
		"topology/t.go: topology (floor 2) imports processors (floor 3)",
		"processors/conn.go: processors imports connectors/kafka: processors never import a concrete connector",
		"processors/p.go:6: uses time.Now: processors take time from the records and the injected Clock",
		"processors/clock.go:3: uses time.Sleep",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem %q in:\n%s", want, got)
		}
	}
	for _, never := range []string{"engine/e.go", "ok_test.go", "clock.go:5", "nested/", "connectors/kafka/k.go"} {
		if strings.Contains(got, never) {
			t.Errorf("%s is not a break but is reported:\n%s", never, got)
		}
	}
}
