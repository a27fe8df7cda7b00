package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"time"
)

// appendProcessArgs appends the flags that member and raw-member processes
// share (network placement, timeout, start handshake), leaving out defaults.
func appendProcessArgs(a []string, iface string, unicast netip.AddrPort, ttl int, timeout time.Duration, waitStart bool) []string {
	if iface != "" {
		a = append(a, "-interface", iface)
	}
	if unicast.IsValid() {
		a = append(a, "-unicast", unicast.String())
	}
	if ttl != 0 {
		a = append(a, "-ttl", strconv.Itoa(ttl))
	}
	if timeout != 0 {
		a = append(a, "-timeout", timeout.String())
	}
	if waitStart {
		a = append(a, "-wait-start")
	}
	return a
}

// readyThenGo is the start handshake of a member process: ready prints
// ReadyLine on stdout, then waits in the background for one line on stdin
// (the parent's "go") and closes start.
func readyThenGo(stdout io.Writer, stdin io.Reader) (ready func(), start chan struct{}) {
	start = make(chan struct{})
	ready = func() {
		fmt.Fprintln(stdout, ReadyLine)
		go func() {
			_, _ = bufio.NewReader(stdin).ReadString('\n')
			close(start)
		}()
	}
	return ready, start
}

// writeResult writes res as indented JSON to the file out, or to stdout when
// out is "-".
func writeResult(stdout io.Writer, out string, res any) error {
	w := stdout
	var f *os.File
	if out != "-" {
		var err error
		if f, err = os.Create(out); err != nil {
			return err
		}
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	err := enc.Encode(res)
	if f != nil {
		err = errors.Join(err, f.Close())
	}
	return err
}
