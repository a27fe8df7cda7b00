package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

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
