package main

import (
	"context"
	"errors"
	"io"
)

func runNetns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("netns: not implemented yet")
}
