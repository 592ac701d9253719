package invariant

import (
	"strings"
	"testing"
)

// Check panics with its message exactly when the checks are compiled in
// (run with and without -tags invariants; make race does the former).
func TestCheck(t *testing.T) {
	Check(true, "never")
	msg := func() (m string) {
		defer func() {
			if r := recover(); r != nil {
				m, _ = r.(string)
			}
		}()
		Check(false, "watermark went back from %d to %d", 5, 3)
		return ""
	}()
	switch {
	case Enabled && !strings.Contains(msg, "invariant violated: watermark went back from 5 to 3"):
		t.Errorf("enabled: a failed check panicked with %q", msg)
	case !Enabled && msg != "":
		t.Errorf("disabled: a failed check panicked with %q", msg)
	}
}
