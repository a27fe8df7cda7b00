// Package wireshark is for looking at nakcast traffic: it holds the
// Wireshark dissector for every nakcast datagram (nakcast.lua beside this
// file, embedded as Dissector), a writer of pcap capture files (PcapWriter,
// used by tests and by the network-namespace harness's capture mode), and
// Decode and Verbose, which run tshark with the dissector over a capture.
//
// The dissector follows wire/FORMAT.md and the membership encoding of
// gms/msg.go; the tests of both packages build captures with the real
// encoders and check what tshark decodes, so the dissector cannot drift
// from the format unnoticed. Nothing in the engine imports this package.
package wireshark

import (
	"bufio"
	"bytes"
	"context"
	_ "embed" // the dissector
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Dissector is the Lua source of the Wireshark dissector (nakcast.lua).
//
//go:embed nakcast.lua
var Dissector []byte

// DissectorFile is the dissector's file name.
const DissectorFile = "nakcast.lua"

// WriteDissector writes the dissector into dir and returns its path.
func WriteDissector(dir string) (string, error) {
	path := filepath.Join(dir, DissectorFile)
	return path, os.WriteFile(path, Dissector, 0o644)
}

// ErrNoTshark is returned when tshark is not on PATH.
var ErrNoTshark = errors.New("wireshark: tshark is not installed (Debian: apt-get install tshark)")

// Tshark returns the path of tshark, or ErrNoTshark.
func Tshark() (string, error) {
	p, err := exec.LookPath("tshark")
	if err != nil {
		return "", ErrNoTshark
	}
	return p, nil
}

// Frame is one decoded frame: each requested field's values in the order
// they occur in the frame (none if the field is absent).
type Frame map[string][]string

// aggregator separates the occurrences of one field in tshark's output.
const aggregator = "\x1f"

// Decode runs tshark with the dissector script over capture and returns,
// per frame in capture order, the values of fields (display-filter names
// such as "nakcast.msg.seq"). opts are passed to tshark before the field
// list (for example "-o", "nakcast.ports:46000"). Anything tshark writes to
// standard error other than its warning about running as root (a Lua error
// while loading the script, for example) is returned as an error.
func Decode(ctx context.Context, script, capture string, fields []string, opts ...string) ([]Frame, error) {
	args := append([]string{"-n", "-X", "lua_script:" + script, "-r", capture}, opts...)
	args = append(args, "-T", "fields", "-E", "header=n", "-E", "separator=/t", "-E", "occurrence=a",
		"-E", "aggregator="+aggregator, "-E", "quote=n")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := run(ctx, args)
	if err != nil {
		return nil, err
	}
	var frames []Frame
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != len(fields) {
			return nil, fmt.Errorf("wireshark: tshark printed %d columns for %d fields: %q", len(cols), len(fields), sc.Text())
		}
		f := Frame{}
		for i, c := range cols {
			if c != "" {
				f[fields[i]] = strings.Split(c, aggregator)
			}
		}
		frames = append(frames, f)
	}
	return frames, sc.Err()
}

// Verbose returns tshark's detailed (-V) output for the frames of capture
// that match the display filter (all if it is empty), decoded with script.
func Verbose(ctx context.Context, script, capture, filter string, opts ...string) (string, error) {
	args := append([]string{"-n", "-X", "lua_script:" + script, "-r", capture}, opts...)
	if filter != "" {
		args = append(args, "-Y", filter)
	}
	out, err := run(ctx, append(args, "-V"))
	return string(out), err
}

func run(ctx context.Context, args []string) ([]byte, error) {
	path, err := Tshark()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// An empty home: no personal preferences, and no personal plugins (a
	// nakcast.lua installed there would register the protocol twice).
	home := filepath.Join(os.TempDir(), "nakcast-tshark-home")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	err = cmd.Run()
	var problems []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "Running as user") {
			problems = append(problems, l)
		}
	}
	if err != nil || len(problems) > 0 {
		return stdout.Bytes(), fmt.Errorf("wireshark: tshark %s: %v: %s", strings.Join(args, " "), err, strings.Join(problems, "; "))
	}
	return stdout.Bytes(), nil
}
