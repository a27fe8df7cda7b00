package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"

	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
)

// runKeygen writes a new group key file (-key-file's format), readable by
// its owner only; it never prints the key.
func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", "Write a new random group key to a key file (mode 0600, never overwritten) for -key-file and\nengine.Config.Keys (auth.ParseKeys). Give every member of a group the same file.", stderr)
	out := fs.String("o", "", "key file to create (required)")
	id := fs.Uint("id", 1, "key id, 1..65535 (a new id for each rotation)")
	bits := fs.Int("bits", 256, "AES key size: 128 or 256")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-o is required")
	}
	if *id < 1 || *id > 65535 {
		return usagef("-id %d: want 1..65535", *id)
	}
	if *bits != 128 && *bits != 256 {
		return usagef("-bits %d: want 128 or 256", *bits)
	}
	secret := make([]byte, *bits/8)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	k, err := auth.NewKey(uint16(*id), secret)
	clear(secret)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := auth.WriteKeys(f, []engine.Key{k}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %v to %s\n", k, *out)
	return nil
}
