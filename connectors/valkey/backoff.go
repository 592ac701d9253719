package valkey

import (
	"time"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// backoff is the pause before retry n (0-based): sinkkit's jittered
// exponential backoff from 20ms up to 2s (Valkey answers fast; a longer
// pause than a chart refresh helps nobody).
func backoff(n int) time.Duration {
	return sinkkit.Backoff{Min: 20 * time.Millisecond, Max: 2 * time.Second}.Delay(n)
}
