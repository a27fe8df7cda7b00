package bench

import (
	"fmt"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread of its own that has entered the named
// network namespace (a member's, Netns.Members[i], or Netns.Bridge()):
// the sockets, links and BPF attachments f makes belong to that namespace
// and keep working from any thread afterwards. The thread is never
// reused: it exits with the goroutine that ran f.
func InNetns(name string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies with the goroutine
		fd, err := unix.Open(filepath.Join("/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("bench: namespace %s: %w", name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			done <- fmt.Errorf("bench: enter namespace %s: %w", name, err)
			return
		}
		done <- f()
	}()
	return <-done
}
