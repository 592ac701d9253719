//go:build !linux

package testkit

import "syscall"

// ChildAttr returns the process attributes for a server or kandle process a
// test starts: its own process group when group is set. Only Linux also
// kills the child when the test binary dies (see proc_linux.go).
func ChildAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
