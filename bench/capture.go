package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nakcast/nakcast/wire/wireshark"
)

// CaptureStats counts what a Capture wrote.
type CaptureStats struct {
	Frames  uint64 // frames written
	Split   uint64 // GSO super-packets written as the datagrams they carry
	Dropped uint64 // frames the kernel dropped because the reader fell behind
}

// CaptureFile is the name of member i's capture in a -pcap directory.
func CaptureFile(i int) string { return fmt.Sprintf("member%d.pcap", i) }

// startCaptures starts a capture of eth0 in each of the first n member
// namespaces into dir (made if missing) with the Wireshark dissector
// beside them; it does nothing if dir is empty. stop ends them and reports
// each one through progress.
func startCaptures(ns *Netns, n int, dir string, snapLen int, progress func(string)) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := wireshark.WriteDissector(dir); err != nil {
		return nil, err
	}
	caps := make([]*Capture, 0, n)
	stop = func() error {
		var errs []error
		for i, c := range caps {
			st, err := c.Stop()
			errs = append(errs, err)
			progress(fmt.Sprintf("capture %s: %d frames (%d GSO super-packets split), %d dropped by the kernel",
				filepath.Join(dir, CaptureFile(i)), st.Frames, st.Split, st.Dropped))
		}
		return errors.Join(errs...)
	}
	for i := range n {
		c, err := StartCapture(ns.Members[i], "eth0", filepath.Join(dir, CaptureFile(i)), snapLen)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		caps = append(caps, c)
	}
	progress(fmt.Sprintf("capturing eth0 of %d members into %s", n, dir))
	return stop, nil
}
