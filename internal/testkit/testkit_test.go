package testkit

import (
	"net"
	"testing"
)

// Each server starts, answers on its port, and is gone after Stop.
func TestServicesStartAndStop(t *testing.T) {
	for _, start := range []func(testing.TB) *Service{
		func(t testing.TB) *Service { return Redis(t) },
		Dynalite, S3rver,
		func(t testing.TB) *Service { return KinesisMock(t, "probe:1") },
	} {
		s := start(t)
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		c.Close()
		s.Stop()
		if c, err := net.Dial("tcp", s.Addr); err == nil {
			c.Close()
			t.Fatalf("%s still listening after Stop", s.Name)
		}
	}
}
