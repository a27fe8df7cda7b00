package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/nakcast/nakcast/bench"
)

// runMember is one member as its own process (bench.MemberMain).
func runMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := bench.MemberMain(ctx, args, os.Stdin, stdout, stderr)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err.Error()}
	}
	return err
}
