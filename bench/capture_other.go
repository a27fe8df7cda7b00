//go:build !linux

package bench

import "errors"

// Capture records the frames of one interface in a network namespace into
// a pcap file; it needs Linux.
type Capture struct{}

// StartCapture fails: captures in namespaces need Linux.
func StartCapture(netns, iface, path string, snapLen int) (*Capture, error) {
	return nil, errors.New("bench: captures in network namespaces need Linux")
}

// Stop does nothing.
func (c *Capture) Stop() (CaptureStats, error) { return CaptureStats{}, nil }
