// Package spec decodes YAML into tagged Go structs and documents them, from
// one source of truth: the struct tags.
//
// A config struct declares each key once:
//
//	Lateness time.Duration `yaml:"lateness" default:"2s" doc:"…" required:"true" enum:"a|b"`
//
// Decode fills the struct from a *yaml.Node, applies defaults (parsed exactly
// like YAML input), and reports every problem at once with its file, line and
// column: unknown keys (with a "did you mean" suggestion), wrong types,
// missing required keys and values outside an enum. Markdown renders the same
// tags as a reference table. Because parsing, defaults, validation and docs
// all read the same tags, they cannot drift apart.
//
// Supported field types: string, signed integers, bool, time.Duration,
// []string (a single scalar is accepted as a one-element list), nested
// structs, pointers to structs, maps with string keys, and any type that
// implements yaml.Unmarshaler. Durations may not be negative.
package spec
