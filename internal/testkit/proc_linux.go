package testkit

import "syscall"

// ChildAttr returns the process attributes for a server or kandle process a
// test starts: its own process group when group is set (so a kill reaches
// what it starts in turn), and SIGKILL when the test binary dies. A test
// binary that go test ends at -timeout (a panic, no cleanups) or that an
// interrupt ends leaves no emulator, broker or kandle instance running
// behind it that way. The signal comes when the thread that started the
// child exits; Go ends a thread only when a goroutine locked to it ends
// without unlocking, which no test does.
func ChildAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
