package engine

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger bridges franz-go's logger to slog, one level quieter: the
// client's info lines (joins, commits) become debug lines here.
func kgoLogger(l *slog.Logger) kgo.Logger { return kgoSlog{l} }

type kgoSlog struct{ l *slog.Logger }

func (k kgoSlog) Level() kgo.LogLevel {
	switch {
	case k.l.Enabled(context.Background(), slog.LevelDebug-4):
		return kgo.LogLevelDebug
	case k.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (k kgoSlog) Log(level kgo.LogLevel, msg string, kv ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error("kafka: "+msg, kv...)
	case kgo.LogLevelWarn:
		k.l.Warn("kafka: "+msg, kv...)
	default:
		k.l.Debug("kafka: "+msg, kv...)
	}
}
