package bench

import (
	"fmt"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread that has entered the named network
// namespace (a member's, Netns.Members[i], or Netns.Bridge()): the
// sockets, links and BPF attachments f makes belong to that namespace and
// keep working from any thread afterwards. The thread moves back to its
// namespace after f and is reused; if it cannot, it is never reused (it
// exits with the goroutine). Threads are not discarded otherwise: a
// child process started with Pdeathsig dies with the thread that forked
// it, which may be any thread of the process.
func InNetns(name string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bench: this thread's namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(filepath.Join("/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bench: namespace %s: %w", name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bench: enter namespace %s: %w", name, err)
			return
		}
		ferr := f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // back home: the thread may serve others
		}
		done <- ferr
	}()
	return <-done
}
